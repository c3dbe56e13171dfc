// `tessera train --nproc N` end to end: N real worker processes under the launcher train with DDP,
// and the result equals one process training on the N·B global batch (the criterion:
// parameters within 1e-5 after 20 steps), for SGD with momentum and for Adam; a run stopped and
// resumed equals the uninterrupted one bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "tessera/io/checkpoint.h"
#include "tessera/nn/module.h"
#include "testing/temp_dir.h"
#include "testing/state_compare.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// 20 steps of an MLP on synthetic data; the per-rank batch is `batch`.
std::string write_config(const std::string& dir, const std::string& optimizer) {
  std::string path = dir + "/config.toml";
  std::ofstream(path) << "[model]\nname = \"mlp\"\nhidden = [32, 16]\n"
                      << "[data]\ndataset = \"synthetic\"\nsamples = 1024\ntest_samples = 128\nclasses = 4\n"
                      << "[optimizer]\nname = \"" << optimizer << "\"\nmomentum = 0.9\n"
                      // Adam at its default 1e-3: its update divides by sqrt(v), which turns the
                      // last-bit differences of a different summation order in near-zero gradients
                      // into ~lr-sized ones (4e-5 after 20 steps at lr 1e-2).
                      << "lr = " << (optimizer == "adam" ? "0.001" : "0.01") << "\n"
                      << "[train]\nepochs = 1\nmax_steps = 20\nthreads = 1\nlog_every = 100\n";
  return path;
}

// Runs tessera train; returns the final checkpoint's model tensors.
nn::StateDict train(const std::string& config, const std::string& out, int nproc, int batch,
                    const std::string& extra = "") {
  std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc " + std::to_string(nproc) +
                    " --set train.batch_size=" + std::to_string(batch) + " --set train.output_dir=" + out + " " +
                    extra + " > " + out + ".log 2>&1";
  int status = std::system(cmd.c_str());
  std::ifstream log(out + ".log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(status, 0) << cmd << "\n" << text;
  return io::load_checkpoint(out + "/checkpoints").model.tensors;
}

class DdpTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(DdpTraining, NProcessesEqualOneProcessOnTheGlobalBatch) {
  const std::string optimizer = GetParam();
  std::string dir = tessera::testing::fresh_dir("ddp", optimizer);
  std::string config = write_config(dir, optimizer);
  const int global_batch = 32;
  nn::StateDict single = train(config, dir + "/single", 1, global_batch);
  for (int nproc : {2, 4}) {
    nn::StateDict ddp = train(config, dir + "/ddp" + std::to_string(nproc), nproc, global_batch / nproc);
    EXPECT_LT(tessera::testing::max_state_difference(single, ddp), 1e-5) << nproc << " processes";
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DdpTraining, ::testing::Values("sgd", "adam"));

TEST(DdpTraining, GlooBackendAndSmallBucketsGiveTheSameResult) {
  std::string dir = tessera::testing::fresh_dir("ddp", "gloo");
  std::string config = write_config(dir, "sgd");
  nn::StateDict single = train(config, dir + "/single", 1, 16);
  nn::StateDict ddp = train(config, dir + "/gloo", 2, 8, "--set distributed.backend=gloo --set distributed.bucket_cap_mb=0.001");
  EXPECT_LT(tessera::testing::max_state_difference(single, ddp), 1e-5);
}

// A run with a fixed seed, layout and thread count is bitwise reproducible on one machine: each
// layout twice, every parameter compared bit for bit (one process on 2 intra-op threads; 2 DDP
// processes with dropout on, whose draws are seeded per rank; 2 over gloo with tiny buckets).
TEST(DdpTraining, TheSameRunTwiceIsBitwiseEqual) {
  std::string dir = tessera::testing::fresh_dir("ddp", "reproducible");
  std::string config = write_config(dir, "adam");
  struct Layout {
    const char* name;
    int nproc, batch;
    const char* extra;
  };
  for (const Layout& l : {Layout{"one-2threads", 1, 32, "--set train.threads=2"},
                          Layout{"ddp2", 2, 16, "--set model.dropout=0.2"},
                          Layout{"ddp2-gloo", 2, 16, "--set distributed.backend=gloo --set distributed.bucket_cap_mb=0.001"}}) {
    nn::StateDict first = train(config, dir + "/" + l.name + "-a", l.nproc, l.batch, l.extra);
    nn::StateDict second = train(config, dir + "/" + l.name + "-b", l.nproc, l.batch, l.extra);
    ASSERT_FALSE(first.empty()) << l.name;
    EXPECT_EQ(tessera::testing::count_bitwise_differences(first, second), 0) << l.name;
  }
}

// Resume at the same layout: 2 DDP processes stopped at step 10 and resumed with --resume end bit for
// bit where the uninterrupted 2-process job does (Adam: its moments, step count and the data position
// all come back from the checkpoint).
TEST(DdpTraining, AResumedRunEqualsTheUninterruptedOneBitForBit) {
  std::string dir = tessera::testing::fresh_dir("ddp", "resume");
  std::string config = write_config(dir, "adam");
  nn::StateDict whole = train(config, dir + "/whole", 2, 16);
  nn::StateDict first = train(config, dir + "/split", 2, 16, "--set train.max_steps=10");
  ASSERT_EQ(io::latest_checkpoint_step(dir + "/split/checkpoints"), 10);
  nn::StateDict resumed = train(config, dir + "/split", 2, 16, "--resume");
  ASSERT_EQ(io::latest_checkpoint_step(dir + "/split/checkpoints"), 20);
  ASSERT_FALSE(resumed.empty());
  EXPECT_GT(tessera::testing::max_state_difference(first, whole), 0.0);  // the halves differ: a real test
  EXPECT_EQ(tessera::testing::count_bitwise_differences(resumed, whole), 0);
}

TEST(DdpTraining, AFailingWorkerFailsTheJobNamingItsRank) {
  std::string dir = tessera::testing::fresh_dir("ddp", "fail");
  std::string config = write_config(dir, "sgd");
  // A data directory that does not exist: every rank fails before training; the launcher names one.
  std::string out = dir + "/bad";
  std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc 2 --set data.dataset=fashion-mnist " +
                    "--set data.dir=/nonexistent --set train.output_dir=" + out + " > " + out + ".log 2>&1";
  int status = std::system(cmd.c_str());
  EXPECT_NE(status, 0);
  std::ifstream log(out + ".log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("tessera train: rank "), std::string::npos) << text;
  EXPECT_NE(text.find("/nonexistent"), std::string::npos) << text;
}

}  // namespace
}  // namespace tessera
