// tessera generate CHECKPOINT: sample text from a character-level language model.
#include <cstdio>

#include "cli/commands.h"
#include "tessera/data/char_dataset.h"
#include "tessera/io/checkpoint.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/train/trainer.h"
#include "tessera/train/whole_checkpoint.h"
#include "tessera/io/checkpoint_keys.h"

namespace tessera::cli {
namespace checkpoint_keys = io::checkpoint_keys;

Command add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Sample text from a char-LM checkpoint");
  struct Options {
    std::string path, prompt = "\n";
    int64_t tokens = 300, top_k = 0;
    float temperature = 0.8f;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("checkpoint", o->path, "A checkpoint directory, model.safetensors, or a run directory")->required();
  cmd->add_option("--prompt", o->prompt, "Text to continue")->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "Characters to generate")->capture_default_str()->check(CLI::Range(1, 1000000));
  cmd->add_option("--temperature", o->temperature, "Softmax temperature")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", o->top_k, "Sample from the k most likely characters (0: all)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  return {cmd, [=]() -> int {
    io::CheckpointFiles files = train::load_whole_checkpoint(o->path);
    const auto& meta = files.model.metadata;
    auto cfg_it = meta.find(checkpoint_keys::kConfig);
    auto vocab_it = meta.find(checkpoint_keys::kVocabulary);
    if (cfg_it == meta.end() || vocab_it == meta.end())
      throw ValueError("[generate] " + files.path + " is not a character-level language model checkpoint "
                       "(no tessera.vocabulary metadata); train one with examples/char_lm.toml");
    train::TrainConfig config = train::parse_config(cfg_it->second, files.path + " (tessera.config)");
    data::Vocabulary vocab = data::Vocabulary::from_string(vocab_it->second);
    auto model = std::dynamic_pointer_cast<nn::CharTransformer>(train::build_model(config, vocab.size()));
    model->load_state_dict(files.model.tensors, true);
    Generator gen(o->seed);
    std::vector<int64_t> ids = model->generate(vocab.encode(o->prompt), o->tokens, o->temperature, o->top_k, gen);
    std::printf("%s\n", vocab.decode(ids).c_str());
    return 0;
  }};
}

}  // namespace tessera::cli
