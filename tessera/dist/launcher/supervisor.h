// The launcher's event loop: spawns the job's processes and watches them with poll() until all
// have exited.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tessera/dist/launcher/launcher.h"

namespace tessera::dist::launcher::detail {

// One process to start: who it is (for its output prefix, messages and outcome) and its contract.
struct ProcessSpec {
  bool server = false;
  int rank = 0;  // a worker's global rank; a server's TESSERA_SERVER_RANK
  std::map<std::string, std::string> variables;  // to_variables(...) of env.h
};

// Runs one process per spec (job.command, in this process's environment with every inherited
// contract variable dropped and the spec's variables put in) and implements launcher.h's failure
// and signal policy; the parameter-server policy when job.servers_per_node > 0.
LaunchResult supervise(const LaunchOptions& job, const std::vector<ProcessSpec>& processes);

}  // namespace tessera::dist::launcher::detail
