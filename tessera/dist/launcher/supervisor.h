// The launcher's event loop: spawns the workers and watches them with poll() until all have exited.
#pragma once
#include <vector>

#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/launcher.h"

namespace tessera::dist::launcher::detail {

// Runs one worker per entry of `envs` (job.command with the variables of env.h added to this
// process's environment) and implements launcher.h's failure and signal policy.
LaunchResult supervise(const LaunchOptions& job, const std::vector<WorkerEnv>& envs);

}  // namespace tessera::dist::launcher::detail
