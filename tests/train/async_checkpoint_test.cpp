// train.checkpoint_async: the background saver (train/background_save.h) writes the same checkpoints
// as the foreground save, bit for bit, and the run is the same run; a run resumed from a background
// checkpoint equals the uninterrupted one; a background save that fails fails the job with the step
// named, and the previous checkpoint stays `latest`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tessera/io/checkpoint.h"
#include "tessera/io/checkpoint_keys.h"
#include "tessera/train/trainer.h"
#include "testing/expect.h"
#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using tessera::testing::bitwise_equal;
using tessera::testing::expect_error;

TrainConfig config_in(const std::string& dir, bool async) {
  TrainConfig c;
  c.model.name = "mlp";
  c.model.hidden = {32};
  c.data.dataset = "synthetic";
  c.data.samples = 512;
  c.data.test_samples = 128;
  c.data.classes = 4;
  c.optimizer.name = "adam";
  c.optimizer.lr = 0.003;
  c.train.epochs = 2;
  c.train.batch_size = 32;  // 16 steps an epoch
  c.train.checkpoint_every = 5;
  c.train.keep_checkpoints = 20;
  c.train.log_every = 100;
  c.train.threads = 1;
  c.train.output_dir = dir;
  c.train.checkpoint_async = async;
  return c;
}

void expect_same_state(const nn::StateDict& a, const nn::StateDict& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first) << what;
    EXPECT_TRUE(bitwise_equal(a[i].second, b[i].second)) << what << ": " << a[i].first;
  }
}

TEST(AsyncCheckpoint, BackgroundSavesEqualForegroundOnesBitForBit) {
  const std::string sync_dir = tessera::testing::fresh_dir("async_checkpoint", "sync");
  const std::string async_dir = tessera::testing::fresh_dir("async_checkpoint", "async");
  Trainer foreground(config_in(sync_dir, false));
  const FitResult f = foreground.fit();
  Trainer background(config_in(async_dir, true));
  const FitResult b = background.fit();
  EXPECT_EQ(f.steps, b.steps);
  EXPECT_EQ(fs::path(b.last_checkpoint).filename(), fs::path(f.last_checkpoint).filename());
  // Steps 5, 10, 15, 16 (an epoch's end), 20, 25, 30, 32: each written whole, equal to the foreground's.
  int compared = 0;
  for (auto& entry : fs::directory_iterator(fs::path(sync_dir) / "checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    const std::pair<io::CheckpointFiles, io::CheckpointFiles> pair{
        io::load_checkpoint(entry.path().string()), io::load_checkpoint((fs::path(async_dir) / "checkpoints" / name).string())};
    expect_same_state(pair.first.model.tensors, pair.second.model.tensors, name + " model");
    expect_same_state(pair.first.trainer.tensors, pair.second.trainer.tensors, name + " optimizer");
    EXPECT_EQ(pair.first.trainer.metadata.at(io::checkpoint_keys::kStep), pair.second.trainer.metadata.at(io::checkpoint_keys::kStep));
    ++compared;
  }
  EXPECT_EQ(compared, 8);
}

TEST(AsyncCheckpoint, AResumedBackgroundCheckpointContinuesTheRun) {
  const std::string whole_dir = tessera::testing::fresh_dir("async_checkpoint", "whole");
  const std::string dir = tessera::testing::fresh_dir("async_checkpoint", "resumed");
  Trainer whole(config_in(whole_dir, true));
  whole.fit();
  TrainConfig first = config_in(dir, true);
  first.train.max_steps = 13;
  Trainer part(first);
  EXPECT_TRUE(part.fit().stopped_early);
  Trainer resumed(config_in(dir, true));
  resumed.resume();
  EXPECT_EQ(resumed.global_step(), 13);
  resumed.fit();
  expect_same_state(whole.model().state_dict(), resumed.model().state_dict(), "resumed run");
}

TEST(AsyncCheckpoint, AFailedBackgroundSaveFailsTheJobAndKeepsThePreviousCheckpoint) {
  const std::string dir = tessera::testing::fresh_dir("async_checkpoint", "failing");
  // Step 10's directory belongs to another run: the save of step 10 is refused.
  const fs::path taken = fs::path(dir) / "checkpoints" / "step-00000010";
  fs::create_directories(taken);
  std::ofstream(taken / "run") << "another-run\n";
  Trainer t(config_in(dir, true));
  expect_error<IoError>([&] { t.fit(); }, {"step-00000010", "another run"});
  EXPECT_EQ(fs::path(io::latest_checkpoint((fs::path(dir) / "checkpoints").string())).filename(), "step-00000005");
}

// kill -9 in the middle of a background write (TESSERA_DEBUG_KILL_IN_SAVE: the process kills itself
// after step 10's model file): step 5 stays `latest` and reads back whole, and the run resumed from it
// ends where the uninterrupted run does, bit for bit.
TEST(AsyncCheckpoint, KillNineDuringABackgroundWriteLeavesThePreviousCheckpointResumable) {
  const std::string dir = tessera::testing::fresh_dir("async_checkpoint", "killed");
  const std::string config = dir + "/config.toml";
  std::ofstream(config) << "[model]\nname = \"mlp\"\nhidden = [32]\n"
                        << "[data]\ndataset = \"synthetic\"\nsamples = 512\ntest_samples = 128\nclasses = 4\n"
                        << "[optimizer]\nname = \"adam\"\nlr = 0.003\n"
                        << "[train]\nepochs = 1\nbatch_size = 32\nmax_steps = 15\ncheckpoint_every = 5\n"
                        << "keep_checkpoints = 20\nthreads = 1\nlog_every = 100\ncheckpoint_async = true\n";
  auto train = [&](const std::string& out, const std::string& prefix, const std::string& extra) {
    const std::string cmd = prefix + std::string(TESSERA_BINARY) + " train " + config + " --set train.output_dir=" + dir +
                            "/" + out + " " + extra + " > " + dir + "/" + out + ".log 2>&1";
    return std::system(cmd.c_str());
  };
  ASSERT_EQ(train("whole", "", ""), 0) << tessera::testing::read_text(dir + "/whole.log");
  EXPECT_NE(train("killed", "TESSERA_DEBUG_KILL_IN_SAVE=10 ", ""), 0);
  const std::string checkpoints = dir + "/killed/checkpoints";
  ASSERT_EQ(io::latest_checkpoint_step(checkpoints), 5) << tessera::testing::read_text(dir + "/killed.log");
  EXPECT_EQ(fs::path(io::newest_verified_checkpoint(checkpoints)).filename(), "step-00000005");
  EXPECT_FALSE(fs::exists(checkpoints + "/step-00000010"));
  ASSERT_EQ(train("killed", "", "--resume"), 0) << tessera::testing::read_text(dir + "/killed.log");
  EXPECT_EQ(io::latest_checkpoint_step(checkpoints), 15);
  expect_same_state(io::load_checkpoint(dir + "/whole/checkpoints").model.tensors,
                    io::load_checkpoint(checkpoints).model.tensors, "resumed after kill -9");
}

}  // namespace
}  // namespace tessera::train
