// tessera eval CHECKPOINT: test accuracy and loss (or validation loss and perplexity for a char-LM).
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "tessera/io/checkpoint.h"
#include "tessera/util/task_progress.h"
#include "tessera/train/trainer.h"
#include "tessera/train/whole_checkpoint.h"
#include "tessera/io/checkpoint_keys.h"

namespace tessera::cli {
namespace checkpoint_keys = io::checkpoint_keys;

namespace {
train::TrainConfig config_from(const io::CheckpointFiles& files) {
  auto it = files.model.metadata.find(checkpoint_keys::kConfig);
  if (it == files.model.metadata.end())
    throw IoError("[eval] " + files.path + "/model.safetensors has no tessera.config metadata; was it written by tessera train?");
  return train::parse_config(it->second, files.path + "/model.safetensors (tessera.config)");
}
}  // namespace

Command add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Evaluate a checkpoint on its test set");
  auto path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  cmd->add_option("checkpoint", *path, "A checkpoint directory, model.safetensors, or a run directory")->required();
  cmd->add_option("--set", *overrides, "Override a config key, e.g. --set data.dir=/path");
  return {cmd, [=]() -> int {
    io::CheckpointFiles files = train::load_whole_checkpoint(*path);  // a sharded checkpoint consolidated
    train::TrainConfig config = config_from(files);
    for (const auto& o : *overrides) train::apply_override(config, o);
    // One process evaluates the whole model, whatever layout trained it.
    config.distributed.strategy = "ddp";
    config.parallel = train::ParallelConfig{};
    train::Trainer trainer(config);
    trainer.model().load_state_dict(files.model.tensors, true);
    train::EvalResult r;
    {
      TaskProgress progress("eval", 0);  // a bar on a terminal, a line per tenth otherwise
      r = trainer.evaluate(&progress);
    }
    if (trainer.vocabulary())
      std::printf("validation loss %.4f, perplexity %.3f on %lld sequences (%s)\n", r.loss, std::exp(r.loss),
                  static_cast<long long>(r.samples), files.path.c_str());
    else
      std::printf("test accuracy %.2f%%, loss %.4f on %lld samples (%s)\n", 100.0 * r.accuracy, r.loss,
                  static_cast<long long>(r.samples), files.path.c_str());
    return 0;
  }};
}

}  // namespace tessera::cli
