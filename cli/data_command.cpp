// tessera data: writes the synthetic data sets the examples train on, in the layouts real data
// comes in, so that an example's config runs offline.
//   tessera data clip-text DIR [--clips N] [--test-clips N] [--seed S]   DIR/train and DIR/test
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "tessera/data/clip_text.h"

namespace tessera::cli {

Command add_data_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "Write a synthetic data set in a real layout (for the examples)");
  cmd->require_subcommand(1);
  auto* clip_text = cmd->add_subcommand("clip-text", "Clip features and narrations with a planted correspondence "
                                                     "(data/clip_text.h): DIR/train and DIR/test, for examples/milnce.toml");
  struct Options {
    std::string dir;
    int64_t clips = 4000, test_clips = 500;
    uint64_t seed = 7;
  };
  auto o = std::make_shared<Options>();
  clip_text->add_option("dir", o->dir, "Where to write (train/ and test/ inside)")->required();
  clip_text->add_option("--clips", o->clips, "Training clips")->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  clip_text->add_option("--test-clips", o->test_clips, "Test clips")->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  clip_text->add_option("--seed", o->seed, "One seed for both sets: the same words look the same in both");
  return {cmd, [clip_text, o]() -> int {
    if (!clip_text->parsed()) return 2;
    data::write_synthetic_clip_text(o->dir + "/train", {.clips = o->clips, .seed = o->seed, .stream = 0});
    data::write_synthetic_clip_text(o->dir + "/test", {.clips = o->test_clips, .seed = o->seed, .stream = 1});
    std::printf("wrote %lld training and %lld test clips to %s/{train,test}\n", static_cast<long long>(o->clips),
                static_cast<long long>(o->test_clips), o->dir.c_str());
    return 0;
  }};
}

}  // namespace tessera::cli
