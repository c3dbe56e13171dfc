#include "tessera/train/ps_job.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/net/interface.h"
#include "tessera/dist/store/store_from_env.h"
#include "tessera/io/atomic_file.h"
#include "tessera/util/settings.h"

namespace tessera::train {

using dist::Milliseconds;

namespace {


std::string job_token() {
  const char* token = env_setting("TESSERA_JOB_TOKEN");
  TESSERA_CHECK(token && *token, "[ps] TESSERA_JOB_TOKEN is not set; start the job with `tessera run --servers S "
                                 "--workers W` or `tessera train --nproc W` with distributed.strategy = \"ps\"");
  return token;
}

}  // namespace

parallel::ps::OptimizerSpec ps_optimizer_spec(const OptimizerConfig& o) {
  parallel::ps::OptimizerSpec s;
  s.name = o.name;
  s.momentum = o.momentum;
  s.weight_decay = o.weight_decay;
  s.nesterov = o.nesterov;
  s.beta1 = o.beta1;
  s.beta2 = o.beta2;
  s.eps = o.eps;
  return s;
}

parallel::ps::ServerOptions ps_server_options(const TrainConfig& c, const dist::launcher::PsRoleEnv& role,
                                              const std::string& token) {
  parallel::ps::ServerOptions o;
  o.server_rank = role.server_rank;
  o.num_servers = role.num_servers;
  o.num_workers = role.num_workers;
  o.mode = parallel::ps::parse_mode(c.distributed.ps_mode);
  o.staleness = c.distributed.staleness;
  o.optimizer = ps_optimizer_spec(c.optimizer);
  o.host = c.distributed.ps_host;
  if (o.host == "auto") {  // loopback on one machine, else the interface the other machines reach
    o.host = dist::detail::listen_address(dist::launcher::master_addr_from_environment().value_or("127.0.0.1"),
                                          "MASTER_ADDR");
  }
  o.token = token;
  o.timeout = collective_timeout(c);
  o.keep_checkpoints = static_cast<int>(c.train.keep_checkpoints);
  return o;
}

parallel::ps::ServerReport serve_parameters(const TrainConfig& config, const dist::launcher::PsRoleEnv& role) {
  parallel::ps::ParameterServer server(ps_server_options(config, role, job_token()));
  auto store = dist::store_from_env(collective_timeout(config), -1 - role.server_rank);
  parallel::ps::publish_server_address(*store, role.server_rank, server.address());
  return server.run();
}

int run_parameter_server(const TrainConfig& config, const dist::launcher::PsRoleEnv& role) {
  parallel::ps::ServerReport r = serve_parameters(config, role);
  nlohmann::json report{{"server", role.server_rank},
                        {"mode", config.distributed.ps_mode},
                        {"staleness_bound", config.distributed.staleness},
                        {"updates", r.updates},
                        {"pushes", r.pushes},
                        {"pulls", r.pulls},
                        {"bytes_received", r.bytes_received},
                        {"bytes_sent", r.bytes_sent},
                        {"max_staleness", r.max_staleness},
                        {"elements", r.elements},
                        {"finished_workers", r.finished_workers},
                        {"lost_workers", r.lost_workers}};
  const auto dir = std::filesystem::path(config.train.output_dir) / "ps";
  std::filesystem::create_directories(dir);
  io::write_file_atomic((dir / ("server-" + std::to_string(role.server_rank) + ".json")).string(), report.dump(2) + "\n");
  return 0;
}

parallel::ps::ClientOptions ps_client_options_from_env(const TrainConfig& config) {
  dist::launcher::WorkerEnv env = dist::launcher::worker_env_from_environment();
  dist::launcher::PsRoleEnv role = dist::launcher::ps_role_from_environment();
  TESSERA_CHECK(role.role == dist::launcher::PsRoleEnv::Role::kWorker, "[ps] this process is not a parameter-server "
                "worker (TESSERA_ROLE is not 'worker'); start it with `tessera run --servers S --workers W`");
  parallel::ps::ClientOptions o;
  o.rank = env.rank;
  o.token = env.job_token;
  o.timeout = collective_timeout(config);
  auto store = dist::store_from_env(o.timeout);
  o.servers = parallel::ps::lookup_server_addresses(*store, role.num_servers);
  return o;
}

}  // namespace tessera::train
