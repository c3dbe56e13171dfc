// tessera train CONFIG [--set key=value ...] [--resume [CHECKPOINT]] [--nproc N]
// With --nproc N > 1 this process becomes the launcher (tessera run) of N copies of itself without
// --nproc; each copy finds its rank in the environment and trains with DDP. With
// distributed.strategy = "ps" it starts distributed.servers parameter servers beside the N workers
// (also for N = 1), and each copy finds its role (server or worker) in the environment.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "tessera/dist/init.h"
#include "tessera/dist/launcher/launcher.h"
#include "tessera/io/checkpoint.h"
#include "tessera/train/model_parallel_trainer.h"
#include "tessera/train/ps_job.h"
#include "tessera/train/trainer.h"

namespace tessera::cli {

namespace {
extern "C" void on_stop_signal(int) { train::Trainer::request_stop(); }

// Runs `nproc` workers of this same command line, minus --nproc, under the launcher.
int launch_workers(int nproc, int servers, const std::string& config_path, const std::vector<std::string>& overrides,
                   bool resume, const std::string& resume_from) {
  dist::launcher::LaunchOptions o;
  o.nproc_per_node = nproc;
  o.servers_per_node = servers;
  o.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "train", config_path};
  for (const auto& s : overrides) o.command.insert(o.command.end(), {"--set", s});
  if (resume) o.command.insert(o.command.end(), {"--resume", resume_from.empty() ? "latest" : resume_from});
  dist::launcher::LaunchResult result = dist::launcher::launch(o);
  if (!result.message.empty()) std::fprintf(stderr, "tessera train: %s\n", result.message.c_str());
  return result.exit_code;
}
// Trains with Ctrl-C / SIGTERM meaning "finish the step, checkpoint, exit 130", then prints the
// final evaluation and checkpoint from rank 0. For the data-parallel and the model-parallel trainer.
template <typename T>
int fit_and_report(T& trainer, const train::TrainConfig& config) {
  const bool lead = trainer.rank() == 0;
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  train::FitResult r = trainer.fit();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (r.last_eval && lead) {
    if (trainer.vocabulary())
      std::printf("final validation loss %.4f\n", r.last_eval->loss);
    else
      std::printf("final test accuracy %.2f%% (loss %.4f) on %lld samples\n", 100.0 * r.last_eval->accuracy,
                  r.last_eval->loss, static_cast<long long>(r.last_eval->samples));
  }
  if (lead) std::printf("checkpoint: %s\n", r.last_checkpoint.c_str());
  const bool interrupted = r.stopped_early && !(config.train.max_steps > 0 && r.steps >= config.train.max_steps);
  return interrupted ? 130 : 0;
}

dist::ProcessGroupPtr init_group(const train::TrainConfig& config) {
  dist::InitOptions init;
  init.backend = config.distributed.backend;
  init.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.distributed.timeout_s * 1000));
  return dist::init_process_group(init);
}

// One rank of a pipeline- and/or tensor-parallel job (parallel.pp · parallel.tp > 1).
int train_model_parallel(const train::TrainConfig& config, bool resume) {
  if (resume)
    throw NotSupportedError("[train] --resume is not supported with parallel.pp / parallel.tp yet: the optimizer "
                            "state stays sharded on the ranks and is not checkpointed");
  const int64_t needed = config.parallel.pp * config.parallel.tp * std::max<int64_t>(1, config.parallel.dp);
  if (!dist::launched_as_job())
    throw ValueError("[train] parallel.pp = " + std::to_string(config.parallel.pp) + " and parallel.tp = " +
                     std::to_string(config.parallel.tp) + " need at least " + std::to_string(needed) +
                     " processes: add --nproc " + std::to_string(needed));
  train::ModelParallelTrainer trainer(config, init_group(config));
  if (trainer.rank() == 0) std::fprintf(stderr, "%s\n", trainer.mesh().describe().c_str());
  return fit_and_report(trainer, config);
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
  auto nproc = std::make_shared<int>(1);
  cmd->add_option("--nproc", *nproc,
                  "Train on N local worker processes: data-parallel (DDP), or with parameter servers when "
                  "distributed.strategy = \"ps\"; train.batch_size is per worker")
      ->check(CLI::Range(1, 1024));
  return {cmd, [=]() -> int {
    train::TrainConfig config = train::load_config(*config_path);
    for (const auto& o : *overrides) train::apply_override(config, o);
    train::validate(config);
    if (*print_config) {
      std::printf("%s\n", train::to_toml(config).c_str());
      return 0;
    }
    const bool ps = config.distributed.strategy == "ps";
    const auto role = dist::launcher::ps_role_from_environment();
    if (role.role == dist::launcher::PsRoleEnv::Role::kServer) return train::run_parameter_server(config, role);
    if ((*nproc > 1 || ps) && !dist::launched_as_job())
      return launch_workers(*nproc, ps ? static_cast<int>(config.distributed.servers) : 0, *config_path, *overrides,
                            cmd->count("--resume") > 0, *resume);
    if (train::uses_model_parallelism(config)) return train_model_parallel(config, cmd->count("--resume") > 0);
    dist::ProcessGroupPtr group;
    std::unique_ptr<train::Trainer> trainer_ptr;
    if (ps) {
      trainer_ptr = std::make_unique<train::Trainer>(config, train::ps_client_options_from_env(config), role.num_workers);
    } else if (dist::launched_as_job()) {
      group = init_group(config);
    }
    if (!trainer_ptr) trainer_ptr = std::make_unique<train::Trainer>(config, group);
    train::Trainer& trainer = *trainer_ptr;
    const bool lead = trainer.rank() == 0;
    const bool fresh_start = *resume == "auto" &&
        io::latest_checkpoint((std::filesystem::path(config.train.output_dir) / "checkpoints").string()).empty();
    if (cmd->count("--resume") && !fresh_start) {
      std::string from = *resume == "latest" || *resume == "auto" || resume->empty() ? "" : *resume;
      trainer.resume(from);
      if (lead) std::fprintf(stderr, "resumed at step %lld\n", static_cast<long long>(trainer.global_step()));
    }
    return fit_and_report(trainer, config);
  }};
}

}  // namespace tessera::cli
