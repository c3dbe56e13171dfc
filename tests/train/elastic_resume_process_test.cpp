// World-size-independent checkpoints (issue 8): a DDP job saved with N workers resumes with M
// workers, keeping the global batch (train.global_batch_size), the schedule position and the data
// position, and ends with the parameters of a job that was never interrupted (within 1e-5: a
// different number of ranks sums the gradients in a different order), for all sixteen pairs of N, M
// in {1, 2, 3, 4} (about 0.3 s a pair).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <unistd.h>

#include "tessera/io/checkpoint.h"
#include "tessera/nn/module.h"
#include "testing/temp_dir.h"
#include "testing/state_compare.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// 2 epochs of 20 global batches of 12 (divisible by 1 to 4 workers) with SGD, a step schedule and
// momentum, so a lost schedule position, data position or optimizer state would show.
std::string write_config(const std::string& dir) {
  std::string path = dir + "/config.toml";
  std::ofstream(path) << "[model]\nname = \"mlp\"\nhidden = [32, 16]\n"
                      << "[data]\ndataset = \"synthetic\"\nsamples = 240\ntest_samples = 64\nclasses = 4\n"
                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.02\n"
                      << "[schedule]\nname = \"step\"\nstep_size = 15\ngamma = 0.5\n"
                      << "[train]\nepochs = 2\nglobal_batch_size = 12\nthreads = 1\nlog_every = 100\n";
  return path;
}

struct TrainRun {
  int status = 0;
  std::string log;
};

TrainRun run_train(const std::string& config, const std::string& out, int nproc, const std::string& extra) {
  std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc " + std::to_string(nproc) +
                    " --set train.output_dir=" + out + " " + extra + " > " + out + ".log 2>&1";
  TrainRun r;
  r.status = std::system(cmd.c_str());
  std::ifstream log(out + ".log");
  r.log.assign((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  return r;
}

// Saves with `from` workers after 13 steps (mid-epoch), resumes with `to`, trains to the end.
void check_resume(int from, int to) {
  static const std::string dir = tessera::testing::fresh_dir("elastic", "resume");
  static const std::string config = write_config(dir);
  static const nn::StateDict reference = [] {
    TrainRun r = run_train(config, dir + "/reference", 1, "");
    EXPECT_EQ(r.status, 0) << r.log;
    return io::load_checkpoint(dir + "/reference/checkpoints").model.tensors;
  }();
  const std::string out = dir + "/n" + std::to_string(from) + "m" + std::to_string(to);
  TrainRun first = run_train(config, out, from, "--set train.max_steps=13");
  ASSERT_EQ(first.status, 0) << first.log;
  nn::StateDict saved = io::load_checkpoint(out + "/checkpoints").model.tensors;
  TrainRun second = run_train(config, out, to, "--resume");
  ASSERT_EQ(second.status, 0) << second.log;
  EXPECT_NE(second.log.find("resumed at step 13"), std::string::npos) << second.log;
  nn::StateDict resumed = io::load_checkpoint(out + "/checkpoints").model.tensors;
  EXPECT_GT(tessera::testing::max_state_difference(saved, resumed), 1e-4) << "the resumed run did not train";
  EXPECT_LT(tessera::testing::max_state_difference(reference, resumed), 1e-5) << from << " -> " << to << " workers\n" << second.log;
}

class ElasticResume : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ElasticResume, SavedWithNResumedWithMEqualsUninterrupted) {
  check_resume(std::get<0>(GetParam()), std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Pairs, ElasticResume,
                         ::testing::Values(std::make_tuple(4, 1), std::make_tuple(1, 4), std::make_tuple(2, 3),
                                           std::make_tuple(3, 2)));

class ElasticResumeMorePairs : public ElasticResume {};

TEST_P(ElasticResumeMorePairs, SavedWithNResumedWithMEqualsUninterrupted) {
  check_resume(std::get<0>(GetParam()), std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Pairs, ElasticResumeMorePairs,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(1, 2), std::make_tuple(1, 3),
                                           std::make_tuple(2, 1), std::make_tuple(2, 2), std::make_tuple(2, 4),
                                           std::make_tuple(3, 1), std::make_tuple(3, 3), std::make_tuple(3, 4),
                                           std::make_tuple(4, 2), std::make_tuple(4, 3), std::make_tuple(4, 4)));

TEST(ElasticBatch, AGlobalBatchTheWorldDoesNotDivideIsRefusedClearly) {
  std::string dir = tessera::testing::fresh_dir("elastic", "indivisible");
  std::string config = write_config(dir);
  TrainRun r = run_train(config, dir + "/run", 3, "--set train.global_batch_size=16");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.log.find("train.global_batch_size 16 is not divisible by the world size 3"), std::string::npos)
      << r.log;
}

}  // namespace
}  // namespace tessera
