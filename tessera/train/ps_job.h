// The two roles of a parameter-server training job started by `tessera run --servers S --workers W`
// (or `tessera train --nproc W` with distributed.strategy = "ps"), wired from the config and the
// launcher's environment (dist/launcher/env.h): servers publish their addresses in the job's
// rendezvous store, workers look them up there.
#pragma once
#include "tessera/dist/launcher/env.h"
#include "tessera/parallel/ps/client.h"
#include "tessera/parallel/ps/server.h"
#include "tessera/train/config.h"

namespace tessera::train {

parallel::ps::OptimizerSpec ps_optimizer_spec(const OptimizerConfig& optimizer);
parallel::ps::ServerOptions ps_server_options(const TrainConfig& config, const dist::launcher::PsRoleEnv& role,
                                              const std::string& token);

// A server's life: listens, publishes its address in the job's store, serves until every worker
// has finished or been lost. Uses the config's optimizer and distributed sections.
parallel::ps::ServerReport serve_parameters(const TrainConfig& config, const dist::launcher::PsRoleEnv& role);

// A server process: serve_parameters, then its report written to <output_dir>/ps/server-<i>.json.
// Returns the exit code.
int run_parameter_server(const TrainConfig& config, const dist::launcher::PsRoleEnv& role);

// A worker process: its rank and the servers' addresses, from the environment and the store.
parallel::ps::ClientOptions ps_client_options_from_env(const TrainConfig& config);

}  // namespace tessera::train
