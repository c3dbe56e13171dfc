// MIL-NCE through the trainer (model.name = "milnce", data.dataset = "clip-text"): it learns the
// synthetic set's planted correspondence, and two real ranks (negatives gathered from both) take
// the steps of one process on the global batch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "tessera/data/clip_text.h"
#include "tessera/io/checkpoint.h"
#include "tessera/train/config.h"
#include "tessera/train/run.h"
#include "testing/state_compare.h"
#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

// The correspondence is learned from many clips: with 1024 the test R@1 stays near chance (1%),
// with 4000 (the example's set) 8 epochs reach 56-64% (train.seed 0, 1, 2).
std::string write_milnce_setup(const std::string& dir, int64_t clips, const std::string& extra = "") {
  data::write_synthetic_clip_text(dir + "/data/train", {.clips = clips, .seed = 7, .stream = 0});
  data::write_synthetic_clip_text(dir + "/data/test", {.clips = 200, .seed = 7, .stream = 1});
  const std::string config = dir + "/milnce.toml";
  std::ofstream(config) << "[model]\nname = \"milnce\"\n" << extra
                        << "[data]\ndataset = \"clip-text\"\ndir = \"" << dir << "/data\"\n"
                        << "[optimizer]\nname = \"adam\"\nlr = 0.002\n"
                        << "[train]\nepochs = 8\nglobal_batch_size = 128\neval_batch_size = 200\nthreads = 1\n"
                        << "log_every = 1000\noutput_dir = \"" << dir << "/run\"\n";
  return config;
}

// Chance is 1/200 = 0.5% (text->video R@1 among the 200 test clips); measured 56%, 60% and 64.5%
// with train.seed 0, 1 and 2 (2026-11-26), so 25% leaves room for any seed and still fails a model
// that learns nothing.
// A full training run (30 s under ASan): in the long tier, which the sanitizer passes leave out.
TEST(LongTierMilNceTraining, TheTrainerLearnsThePlantedCorrespondence) {
  const std::string dir = tessera::testing::fresh_dir("milnce_training", "learns");
  TrainConfig c = load_config(write_milnce_setup(dir, 4000));
  RunOutcome out = run(c, {.stop_on_signals = false});
  ASSERT_TRUE(out.fit.last_eval);
  EXPECT_EQ(out.fit.last_eval->samples, 200);
  EXPECT_GE(out.fit.last_eval->accuracy, 0.25);
}

// Runs tessera train; returns the final checkpoint's model tensors.
nn::StateDict train_milnce(const std::string& config, const std::string& out, int nproc, const std::string& extra) {
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc " + std::to_string(nproc) +
                          " --set train.output_dir=" + out + " --set train.max_steps=12 " +
                          "--set optimizer.name=sgd --set optimizer.lr=0.5 " + extra + " > " + out + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(status, 0) << cmd << "\n" << tessera::testing::read_text(out + ".log");
  return io::load_checkpoint(out + "/checkpoints").model.tensors;
}

TEST(MilNceTraining, TwoAndFourRanksTakeTheStepsOfOneProcessOnTheGlobalBatch) {
  const std::string dir = tessera::testing::fresh_dir("milnce_training", "ranks");
  const std::string config = write_milnce_setup(dir, 256);
  for (const std::string text : {"bag", "transformer"}) {
    const std::string extra = "--set model.text_encoder=" + text + " --set model.layers=1 --set model.heads=2";
    const nn::StateDict one = train_milnce(config, dir + "/one-" + text, 1, extra);
    for (int ranks : text == "bag" ? std::vector<int>{2, 4} : std::vector<int>{2})
      EXPECT_LT(tessera::testing::max_state_difference(
                    one, train_milnce(config, dir + "/" + std::to_string(ranks) + "-" + text, ranks, extra)),
                1e-4)
          << text << ", " << ranks << " ranks";
  }
}

TEST(MilNceTraining, AConfigThatCannotTrainItIsRefused) {
  EXPECT_THROW(validate(parse_config("[model]\nname = \"milnce\"\n", "test")), ValueError);  // needs clip-text
  EXPECT_THROW(validate(parse_config("[data]\ndataset = \"clip-text\"\n", "test")), ValueError);  // needs milnce
  EXPECT_THROW(validate(parse_config("[model]\nname = \"milnce\"\ntext_encoder = \"lstm\"\n[data]\ndataset = \"clip-text\"\n",
                                     "test")),
               ValueError);
  EXPECT_THROW(validate(parse_config("[model]\nname = \"milnce\"\n[data]\ndataset = \"clip-text\"\n"
                                     "[distributed]\nstrategy = \"ps\"\n",
                                     "test")),
               ValueError);
}

}  // namespace
}  // namespace tessera::train
