// Parameter-server training end to end: `tessera train` with distributed.strategy = "ps" starts
// real server and worker processes under the launcher (tessera run --servers S --workers W).
//   - synchronous: equals one process training on the global batch (parameters within 1e-5 after
//     20 steps), and a run stopped at step 10 and resumed from the servers' shards equals it too;
//   - bounded staleness with a slowed worker keeps its bound (the servers' reports say how close);
//   - asynchronous: a worker killed with SIGKILL does not stop the job;
//   - LongTier: asynchronous MLP on Fashion-MNIST with 2 and 4 workers reaches >= 87% in 3 epochs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/io/checkpoint.h"
#include "tessera/nn/module.h"
#include "testing/temp_dir.h"
#include "testing/state_compare.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string write_config(const std::string& dir, const std::string& mode, const std::string& optimizer = "sgd") {
  std::string path = dir + "/config.toml";
  std::ofstream(path) << "[model]\nname = \"mlp\"\nhidden = [32, 16]\n"
                      << "[data]\ndataset = \"synthetic\"\nsamples = 1024\ntest_samples = 128\nclasses = 4\n"
                      << "[optimizer]\nname = \"" << optimizer << "\"\nmomentum = 0.9\n"
                      << "lr = " << (optimizer == "adam" ? "0.001" : "0.01") << "\n"
                      << "[train]\nepochs = 1\nmax_steps = 20\nthreads = 1\nlog_every = 100\n"
                      << "[distributed]\nstrategy = \"ps\"\nservers = 2\nps_mode = \"" << mode << "\"\ntimeout_s = 60\n";
  return path;
}

struct JobRun {
  int status = -1;
  std::string log;
};

JobRun run(const std::string& cmd_tail, const std::string& log_path) {
  std::string cmd = std::string(TESSERA_BINARY) + " " + cmd_tail + " > " + log_path + " 2>&1";
  JobRun r;
  r.status = std::system(cmd.c_str());
  std::ifstream log(log_path);
  r.log.assign((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  return r;
}

JobRun train(const std::string& config, const std::string& out, int nproc, int batch, const std::string& extra = "") {
  return run("train " + config + " --nproc " + std::to_string(nproc) + " --set train.batch_size=" +
                 std::to_string(batch) + " --set train.output_dir=" + out + " " + extra,
             out + ".log");
}

nlohmann::json server_report(const std::string& out, int server) {
  std::ifstream in(out + "/ps/server-" + std::to_string(server) + ".json");
  EXPECT_TRUE(in.good()) << "no report of server " << server << " under " << out;
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

// ps-shards/<run id>/server-<s>/step-<step>.safetensors under `out`, whatever the run's id.
std::vector<std::string> shard_files(const std::string& out, int server, int step) {
  std::vector<std::string> found;
  const fs::path root = fs::path(out) / "ps-shards";
  if (!fs::exists(root)) return found;
  for (const auto& run : fs::directory_iterator(root)) {
    const fs::path file = run.path() / ("server-" + std::to_string(server)) / ("step-" + std::to_string(step) + ".safetensors");
    if (fs::exists(file)) found.push_back(file.string());
  }
  return found;
}

class PsTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(PsTraining, SynchronousEqualsOneProcessOnTheGlobalBatch) {
  const std::string optimizer = GetParam();
  std::string dir = tessera::testing::fresh_dir("ps", "sync_" + optimizer);
  std::string config = write_config(dir, "sync", optimizer);
  JobRun single = train(config, dir + "/single", 1, 32, "--set distributed.strategy=ddp");
  ASSERT_EQ(single.status, 0) << single.log;
  JobRun ps = train(config, dir + "/ps", 2, 16);
  ASSERT_EQ(ps.status, 0) << ps.log;
  EXPECT_LT(tessera::testing::max_state_difference(io::load_checkpoint(dir + "/single/checkpoints").model.tensors,
                           io::load_checkpoint(dir + "/ps/checkpoints").model.tensors),
            1e-5);
  for (int s = 0; s < 2; ++s) EXPECT_EQ(server_report(dir + "/ps", s)["updates"], 20);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, PsTraining, ::testing::Values("sgd", "adam"));

TEST(PsTrainingResume, StoppedAtStep10AndResumedFromTheShardsEqualsAnUninterruptedRun) {
  std::string dir = tessera::testing::fresh_dir("ps", "resume");
  std::string config = write_config(dir, "sync", "adam");
  JobRun whole = train(config, dir + "/whole", 2, 16);
  ASSERT_EQ(whole.status, 0) << whole.log;
  JobRun first = train(config, dir + "/split", 2, 16, "--set train.max_steps=10");
  ASSERT_EQ(first.status, 0) << first.log;
  ASSERT_EQ(shard_files(dir + "/split", 1, 10).size(), 1u);
  JobRun second = train(config, dir + "/split", 2, 16, "--resume");
  ASSERT_EQ(second.status, 0) << second.log;
  EXPECT_NE(second.log.find("restored step 10"), std::string::npos) << second.log;
  EXPECT_EQ(tessera::testing::max_state_difference(io::load_checkpoint(dir + "/whole/checkpoints").model.tensors,
                           io::load_checkpoint(dir + "/split/checkpoints").model.tensors),
            0.0);
}

// The lost-checkpoint case of the parameter servers: a longer run's shards (step 20) left in the
// directory must not push a new run's own shards (step 10, keep 1) out of the retention, or that
// run's --resume finds its checkpoint without the servers' half.
TEST(PsTrainingResume, AnotherRunsLaterShardsNeverDeleteThisRunsOwn) {
  std::string dir = tessera::testing::fresh_dir("ps", "two_runs");
  std::string config = write_config(dir, "sync", "adam");
  const std::string keep1 = "--set train.keep_checkpoints=1";
  JobRun longer = train(config, dir + "/out", 2, 16, keep1);
  ASSERT_EQ(longer.status, 0) << longer.log;
  ASSERT_EQ(shard_files(dir + "/out", 0, 20).size(), 1u);
  JobRun refused = train(config, dir + "/out", 2, 16, keep1 + " --set train.max_steps=10");
  EXPECT_NE(refused.status, 0) << refused.log;
  EXPECT_NE(refused.log.find("holds another run's checkpoints"), std::string::npos) << refused.log;
  JobRun shorter = train(config, dir + "/out", 2, 16, keep1 + " --set train.max_steps=10 --overwrite");
  ASSERT_EQ(shorter.status, 0) << shorter.log;
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(shard_files(dir + "/out", s, 10).size(), 1u) << "server " << s << "'s own step 10 was pruned";
    EXPECT_EQ(shard_files(dir + "/out", s, 20).size(), 1u) << "the other run's step 20 was deleted";
  }
  JobRun resumed = train(config, dir + "/out", 2, 16, keep1 + " --set train.max_steps=20 --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.log;
  EXPECT_NE(resumed.log.find("restored step 10"), std::string::npos) << resumed.log;
  // The resumed run equals the longer one, which trained the same 20 steps from the same seed.
  std::vector<fs::path> moved_aside;
  for (const auto& e : fs::directory_iterator(dir + "/out"))
    if (e.path().filename().string().rfind("previous-", 0) == 0) moved_aside.push_back(e.path());
  ASSERT_EQ(moved_aside.size(), 1u);
  EXPECT_EQ(tessera::testing::max_state_difference(
                io::load_checkpoint((moved_aside[0] / "checkpoints").string()).model.tensors,
                io::load_checkpoint(dir + "/out/checkpoints").model.tensors),
            0.0);
}

TEST(PsTrainingStaleness, ASlowedWorkerHoldsTheOthersWithinTheBound) {
  std::string dir = tessera::testing::fresh_dir("ps", "ssp");
  std::string config = write_config(dir, "ssp");
  JobRun r = train(config, dir + "/out", 3, 16,
                "--set distributed.staleness=2 --set distributed.debug_slow_rank=2 --set distributed.debug_slow_ms=30");
  ASSERT_EQ(r.status, 0) << r.log;
  for (int s = 0; s < 2; ++s) {
    auto report = server_report(dir + "/out", s);
    std::printf("server %d: largest staleness %d (bound 2)\n", s, report["max_staleness"].get<int>());
    EXPECT_LE(report["max_staleness"].get<int>(), 2);
    EXPECT_EQ(report["updates"], 3 * 20);
  }
}

TEST(PsTrainingFaults, AWorkerKilledDuringAsynchronousTrainingDoesNotStopTheJob) {
  std::string dir = tessera::testing::fresh_dir("ps", "kill");
  std::string config = write_config(dir, "async");
  JobRun r = train(config, dir + "/out", 3, 16,
                "--set train.epochs=2 --set train.max_steps=40 --set distributed.debug_kill_rank=1 --set distributed.debug_kill_step=5");
  EXPECT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("worker rank 1"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("goes on without it"), std::string::npos) << r.log;
  for (int s = 0; s < 2; ++s) {
    auto report = server_report(dir + "/out", s);
    EXPECT_EQ(report["lost_workers"], nlohmann::json::array({1}));
    EXPECT_EQ(report["updates"], 40 + 5 + 40);  // both survivors ran every step; worker 1 pushed 5
  }
  EXPECT_TRUE(fs::exists(dir + "/out/checkpoints"));
}

TEST(PsTrainingFaults, AWorkerKilledDuringSynchronousTrainingFailsTheJobNamingIt) {
  std::string dir = tessera::testing::fresh_dir("ps", "kill_sync");
  std::string config = write_config(dir, "sync");
  JobRun r = train(config, dir + "/out", 2, 16, "--set distributed.debug_kill_rank=1 --set distributed.debug_kill_step=5");
  EXPECT_NE(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("worker 1"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("synchronous training cannot go on without it"), std::string::npos) << r.log;
}

class PsAccuracyLongTier : public ::testing::TestWithParam<int> {};

TEST_P(PsAccuracyLongTier, AsynchronousMlpReaches87PercentIn3Epochs) {
  const int workers = GetParam();
  std::string dir = tessera::testing::fresh_dir("ps", "accuracy_" + std::to_string(workers));
  JobRun r = run("train " + std::string(TESSERA_SOURCE_DIR) + "/examples/mlp_ps.toml --nproc " + std::to_string(workers) +
                  " --set train.output_dir=" + dir + "/out --set distributed.ps_mode=async",
              dir + "/out.log");
  ASSERT_EQ(r.status, 0) << r.log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.log, m, std::regex("final test accuracy ([0-9.]+)%"))) << r.log;
  const double accuracy = std::stod(m[1]);
  std::printf("asynchronous PS, %d workers, 2 servers: %.2f%% after 3 epochs\n", workers, accuracy);
  EXPECT_GE(accuracy, 87.0);
}

INSTANTIATE_TEST_SUITE_P(Workers, PsAccuracyLongTier, ::testing::Values(2, 4));

}  // namespace
}  // namespace tessera
