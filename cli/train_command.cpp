// tessera train CONFIG [--set key=value ...] [--resume [CHECKPOINT]] [--nproc N] [--device DEV]
// With --nproc N > 1 this process becomes the launcher (tessera run) of N copies of itself without
// --nproc; each copy finds its rank in the environment and trains with DDP. With
// distributed.strategy = "ps" it starts distributed.servers parameter servers beside the N workers
// (also for N = 1), and each copy finds its role (server or worker) in the environment.
// With --launcher ray the N workers are Ray actors of a Ray cluster instead (cli/ray_launch.h).
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/ray_launch.h"
#include "tessera/dist/init.h"
#include "tessera/dist/flight_recorder.h"
#include "tessera/dist/flight_report.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/launcher.h"
#include "tessera/io/checkpoint.h"
#include "tessera/util/clock.h"
#include "tessera/train/run.h"

namespace tessera::cli {

namespace {

// After a failed job: what the flight records its ranks wrote during it say together (what
// `tessera trace analyze DIR` prints), so the user sees which rank is missing from which collective
// without running it. Records older than the job are left out.
void print_flight_analysis(const std::string& output_dir, int64_t job_start_us) {
  std::string dir = dist::flight_recorder_dir();
  if (dir.empty()) dir = (std::filesystem::path(output_dir) / "flight").string();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return;
  try {
    std::vector<nlohmann::json> records;
    for (auto& r : dist::read_flight_records(dir))
      if (r.value("dumped_us", int64_t{0}) >= job_start_us) records.push_back(std::move(r));
    if (records.empty()) return;
    std::fprintf(stderr, "tessera train: the ranks' flight records (tessera trace analyze %s):\n%s", dir.c_str(),
                 dist::analyze_flight_records(records).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera train: could not read the flight records in %s: %s\n", dir.c_str(), e.what());
  }
}

// Runs `nproc` workers of this same command line, minus --nproc, under the launcher.
int launch_workers(int nproc, int servers, const std::string& config_path, const std::vector<std::string>& overrides,
                   bool resume, const std::string& resume_from, const std::string& output_dir) {
  const int64_t job_start_us = unix_micros();
  dist::launcher::LaunchOptions o;
  o.nproc_per_node = nproc;
  o.servers_per_node = servers;
  o.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "train", config_path};
  for (const auto& s : overrides) o.command.insert(o.command.end(), {"--set", s});
  if (resume) o.command.insert(o.command.end(), {"--resume", resume_from.empty() ? "latest" : resume_from});
  dist::launcher::LaunchResult result = dist::launcher::launch(o);
  if (!result.message.empty()) std::fprintf(stderr, "tessera train: %s\n", result.message.c_str());
  if (result.exit_code != 0) print_flight_analysis(output_dir, job_start_us);
  return result.exit_code;
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model from a TOML config (see examples/*.toml)");
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto resume = std::make_shared<std::string>();
  auto print_config = std::make_shared<bool>(false);
  cmd->add_option("config", *config_path, "Config file (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", *overrides, "Override a key, e.g. --set optimizer.lr=0.01 (repeatable)");
  cmd->add_option("--resume", *resume,
                  "Continue from a checkpoint: 'latest' (this run's newest), 'auto' (the newest if there is one, else "
                  "start afresh: what an elastic job's restarted workers use) or a checkpoint path")
      ->expected(0, 1)
      ->default_str("latest");
  cmd->add_flag("--print-config", *print_config, "Print the resolved config and exit");
  auto overwrite = std::make_shared<bool>(false);
  cmd->add_flag("--overwrite", *overwrite,
                "Start afresh in an output_dir that holds another run's checkpoints, moving them (and its metrics) "
                "aside to <output_dir>/previous-<run id>/; without it such a start is refused");
  auto trace = std::make_shared<bool>(false);
  cmd->add_flag("--trace", *trace,
                "Write each rank's timeline to <output_dir>/trace/rank-R.json ([observability] trace; merge them "
                "with tessera trace merge)");
  auto device = std::make_shared<std::string>();
  cmd->add_option("--device", *device,
                  "Train on this device: cpu, cuda or cuda:N (train.device; with --nproc, DDP through the CPU "
                  "backends, local rank r on cuda:(r mod GPUs) for plain cuda)");
  auto nproc = std::make_shared<int>(1);
  cmd->add_option("--nproc", *nproc,
                  "Train on N local worker processes: data-parallel (DDP), or with parameter servers when "
                  "distributed.strategy = \"ps\"; train.batch_size is per worker")
      ->check(CLI::Range(1, 1024));
  auto launcher = std::make_shared<std::string>("local");
  cmd->add_option("--launcher", *launcher,
                  "Where the --nproc workers run: local (processes of this machine) or ray (one Ray actor each, on the "
                  "Ray cluster of --address; restarted from the newest checkpoint when an actor or node dies)")
      ->check(CLI::IsMember({"local", "ray"}));
  auto ray = std::make_shared<RayLaunch>();
  cmd->add_option("--address", ray->address, "With --launcher ray: the Ray cluster, HOST:PORT (else RAY_ADDRESS, else a "
                                             "Ray started for this job)");
  cmd->add_option("--ray-resources", ray->resources,
                  "With --launcher ray: each worker's Ray resources, NAME=AMOUNT (repeatable; default CPU=1)");
  cmd->add_option("--placement", ray->placement, "With --launcher ray: the placement group's strategy")
      ->check(CLI::IsMember({"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}));
  cmd->add_option("--max-failures", ray->max_failures, "With --launcher ray: restarts allowed before the job fails")
      ->check(CLI::Range(0, 1000));
  return {cmd, [=]() -> int {
    if (*launcher == "ray") {
      for (const char* local_only : {"--print-config", "--overwrite", "--trace", "--device"})
        if (cmd->count(local_only) > 0)
          throw ValueError(std::string("[train] --launcher ray takes --set for every config key; ") + local_only +
                           " is not passed to the Ray workers");
      RayLaunch launch = *ray;
      launch.config_path = *config_path;
      launch.overrides = *overrides;
      launch.num_workers = *nproc;
      launch.resume = cmd->count("--resume") > 0;
      TESSERA_CHECK(!launch.resume || resume->empty() || *resume == "latest" || *resume == "auto",
                    "[train] --launcher ray resumes from the newest checkpoint of output_dir (--resume), not from ",
                    *resume);
      return exec_ray_driver(ray_train_arguments(launch));
    }
    for (const char* ray_only : {"--address", "--ray-resources", "--placement", "--max-failures"})
      TESSERA_CHECK(cmd->count(ray_only) == 0, "[train] ", ray_only, " is an option of --launcher ray");
    train::TrainConfig config = train::load_config(*config_path);
    for (const auto& o : *overrides) train::apply_override(config, o);
    if (*overwrite) config.train.overwrite = true;
    if (*trace) config.observability.trace = true;
    if (!device->empty()) config.train.device = *device;
    train::validate(config);
    if (*print_config) {
      std::printf("%s\n", train::to_toml(config).c_str());
      return 0;
    }
    const bool ps = config.distributed.strategy == "ps";
    const bool resuming = cmd->count("--resume") > 0;
    const bool server = dist::launcher::ps_role_from_environment().role == dist::launcher::PsRoleEnv::Role::kServer;
    if ((*nproc > 1 || ps) && !dist::launched_as_job() && !server) {
      // Refused here, before any worker starts, as each worker's Trainer would refuse it.
      const std::string latest =
          io::latest_checkpoint((std::filesystem::path(config.train.output_dir) / "checkpoints").string());
      if (!resuming && !config.train.overwrite && !latest.empty())
        throw train::another_runs_checkpoints(config.train.output_dir, latest);
      std::vector<std::string> sets = *overrides;
      if (config.train.overwrite) sets.push_back("train.overwrite=true");
      if (config.observability.trace) sets.push_back("observability.trace=true");
      if (!device->empty()) sets.push_back("train.device=" + *device);
      return launch_workers(*nproc, ps ? static_cast<int>(config.distributed.servers) : 0, *config_path, sets,
                            resuming, *resume, config.train.output_dir);
    }
    train::RunOptions options;
    if (resuming) options.resume = resume->empty() ? "latest" : *resume;
    const train::RunOutcome outcome = train::run(config, options);
    return outcome.interrupted ? 130 : 0;
  }};
}

}  // namespace tessera::cli
