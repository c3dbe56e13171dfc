// tessera doctor: under `tessera run`, measures every link between the job's hosts (latency and
// bandwidth) and names a slow one (dist/preflight.h); `tessera run --preflight` runs it first.
#include <cstdio>

#include "cli/commands.h"
#include "tessera/dist/init.h"
#include "tessera/dist/preflight.h"

namespace tessera::cli {

Command add_doctor_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Under tessera run: measure latency and bandwidth between every pair of "
                                           "hosts and name a link slower than the others");
  auto options = std::make_shared<dist::PreflightOptions>();
  auto backend = std::make_shared<std::string>("gloo");
  auto timeout_s = std::make_shared<double>(60.0);
  cmd->add_option("--bytes", options->bytes, "Bytes per bandwidth transfer")->capture_default_str()->check(CLI::Range(int64_t{4}, int64_t{1} << 32));
  cmd->add_option("--backend", *backend, "Process-group backend to measure with (the network path: gloo)")->capture_default_str();
  cmd->add_option("--timeout", *timeout_s, "Seconds any one transfer may take")->capture_default_str()->check(CLI::PositiveNumber);
  return {cmd, [=]() -> int {
    TESSERA_CHECK(dist::launched_as_job(), "[doctor] run it under tessera run, one per host: tessera run --nnodes N "
                                           "--node-rank I --nproc-per-node 1 --master-addr A --master-port P -- tessera doctor");
    dist::InitOptions init;
    init.backend = *backend;
    init.timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000));
    dist::ProcessGroupPtr group = dist::init_process_group(init);
    dist::PreflightReport report = dist::run_preflight(*group, *options);
    if (group->rank() == 0) std::printf("%s", report.table().c_str());
    return 0;
  }};
}

}  // namespace tessera::cli
