// tessera train CONFIG [--set key=value ...] [--resume [CHECKPOINT]]
#include <csignal>
#include <cstdio>

#include "cli/commands.h"
#include "tessera/train/trainer.h"

namespace tessera::cli {

namespace {
extern "C" void on_stop_signal(int) { train::Trainer::request_stop(); }
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
                  "Continue from a checkpoint: 'latest' (this run's newest) or a checkpoint path")
      ->expected(0, 1)
      ->default_str("latest");
  cmd->add_flag("--print-config", *print_config, "Print the resolved config and exit");
  return {cmd, [=]() -> int {
    train::TrainConfig config = train::load_config(*config_path);
    for (const auto& o : *overrides) train::apply_override(config, o);
    train::validate(config);
    if (*print_config) {
      std::printf("%s\n", train::to_toml(config).c_str());
      return 0;
    }
    train::Trainer trainer(config);
    if (cmd->count("--resume")) {
      std::string from = *resume == "latest" || resume->empty() ? "" : *resume;
      trainer.resume(from);
      std::fprintf(stderr, "resumed at step %lld\n", static_cast<long long>(trainer.global_step()));
    }
    // Ctrl-C / SIGTERM: finish the current step, write a checkpoint, exit 130.
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    train::FitResult r = trainer.fit();
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    if (r.last_eval) {
      if (trainer.vocabulary())
        std::printf("final validation loss %.4f\n", r.last_eval->loss);
      else
        std::printf("final test accuracy %.2f%% (loss %.4f) on %lld samples\n", 100.0 * r.last_eval->accuracy,
                    r.last_eval->loss, static_cast<long long>(r.last_eval->samples));
    }
    std::printf("checkpoint: %s\n", r.last_checkpoint.c_str());
    bool interrupted = r.stopped_early && !(config.train.max_steps > 0 && r.steps >= config.train.max_steps);
    return interrupted ? 130 : 0;
  }};
}

}  // namespace tessera::cli
