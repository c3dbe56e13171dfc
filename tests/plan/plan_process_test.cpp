// tessera plan against real jobs: for each layout, a real `tessera train --nproc N` of 3 steps writes
// its flight records at the end (TESSERA_FLIGHT_AT_END=1), and `tessera plan CONFIG --world N
// --compare-flight` must find the same collectives under the same numbers on every rank and group,
// and a rank-0 peak of live tensor bytes within 5% of the one the run recorded (issue: "The memory
// figures match a real run's metrics within 5%").
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/temp_dir.h"

namespace tessera {
namespace {

std::string mlp_config(const std::string& dir) {
  const std::string path = dir + "/mlp.toml";
  std::ofstream(path) << "[model]\nname = \"mlp\"\nhidden = [64, 32]\n"
                      << "[data]\ndataset = \"synthetic\"\nsamples = 2048\ntest_samples = 64\nclasses = 4\n"
                      << "[optimizer]\nname = \"adam\"\nlr = 0.01\n"
                      << "[train]\nepochs = 1\nmax_steps = 3\nthreads = 1\nlog_every = 100\nglobal_batch_size = 48\n";
  return path;
}

std::string gpt_config(const std::string& dir) {
  {
    std::ofstream out(dir + "/corpus.txt");
    for (int i = 0; i < 80; ++i) out << (i % 3 ? "to be or not to be, that is the question\n" : "all the world's a stage\n");
  }
  const std::string path = dir + "/gpt.toml";
  std::ofstream(path) << "[model]\nname = \"transformer\"\nlayers = 2\nheads = 4\nembed_dim = 32\ncontext = 16\ndropout = 0.0\n"
                      << "[data]\ndataset = \"text\"\npath = \"" << dir << "/corpus.txt\"\n"
                      << "[optimizer]\nname = \"adamw\"\nlr = 0.001\n"
                      << "[train]\nepochs = 1\nmax_steps = 3\nthreads = 1\nlog_every = 100\nbatch_size = 8\n"
                      << "[parallel]\nmicrobatches = 4\n";
  return path;
}

// Every real run writes its flight records when it ends, for --compare-flight.
constexpr const char* kFlightAtEnd = "TESSERA_FLIGHT_AT_END=1 ";

int run(const std::string& cmd, const std::string& log) {
  const int status = std::system((cmd + " > " + log + " 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The last step record's peak_allocated_bytes (rank 0's).
int64_t recorded_peak(const std::string& out) {
  std::ifstream metrics(out + "/metrics.jsonl");
  int64_t peak = -1;
  for (std::string line; std::getline(metrics, line);)
    if (auto r = nlohmann::json::parse(line); r.value("type", "") == "step") peak = r.value("peak_allocated_bytes", int64_t{-1});
  return peak;
}

void expect_plan_matches_run(const std::string& dir, const std::string& name, const std::string& config, int world,
                             const std::string& sets) {
  SCOPED_TRACE(name);
  const std::string out = dir + "/" + name;
  ASSERT_EQ(run(std::string(kFlightAtEnd) + TESSERA_BINARY + " train " + config + " --nproc " + std::to_string(world) +
                    " --set train.output_dir=" + out + " " + sets,
                out + ".train.log"),
            0)
      << tessera::testing::read_text(out + ".train.log");
  const std::string json = out + ".plan.json";
  const int status = run(std::string(TESSERA_BINARY) + " plan " + config + " --world " + std::to_string(world) + " " +
                             sets + " --json " + json + " --compare-flight " + out + "/flight",
                         out + ".plan.log");
  const std::string printed = tessera::testing::read_text(out + ".plan.log");
  ASSERT_EQ(status, 0) << printed;
  EXPECT_NE(printed.find("all the same"), std::string::npos) << printed;
  EXPECT_NE(printed.find("every rank of every process group issues the same collectives"), std::string::npos) << printed;
  const nlohmann::json plan = nlohmann::json::parse(tessera::testing::read_text(json));
  const int64_t planned = plan["ranks"][0]["memory"]["peak"].get<int64_t>();
  const int64_t real = recorded_peak(out);
  ASSERT_GT(real, 0) << tessera::testing::read_text(out + "/metrics.jsonl");
  EXPECT_NEAR(static_cast<double>(planned), static_cast<double>(real), 0.05 * static_cast<double>(real))
      << "planned " << planned << " bytes, the run's peak " << real << "\n" << printed;
}

}  // namespace

TEST(PlanProcess, DataParallelLayoutsIssueThePlannedCollectivesAndPeakAsPlanned) {
  const std::string dir = tessera::testing::fresh_dir("plan_process", "data_parallel");
  const std::string mlp = mlp_config(dir);
  expect_plan_matches_run(dir, "ddp", mlp, 2, "");
  expect_plan_matches_run(dir, "zero1", mlp, 2, "--set distributed.strategy=zero --set distributed.zero_stage=1");
  expect_plan_matches_run(dir, "zero3", mlp, 3, "--set distributed.strategy=zero --set distributed.zero_stage=3");
  expect_plan_matches_run(dir, "hsdp", mlp, 4,
                          "--set distributed.strategy=hsdp --set distributed.zero_stage=3 --set distributed.hsdp_shard_size=2");
}

TEST(PlanProcess, ModelParallelLayoutsIssueThePlannedCollectivesAndPeakAsPlanned) {
  const std::string dir = tessera::testing::fresh_dir("plan_process", "model_parallel");
  const std::string gpt = gpt_config(dir);
  expect_plan_matches_run(dir, "pp2tp2", gpt, 4, "--set parallel.pp=2 --set parallel.tp=2");
  expect_plan_matches_run(dir, "pp2zbv", gpt, 2, "--set parallel.pp=2 --set parallel.schedule=zb-v");
  expect_plan_matches_run(dir, "dp2tp2sp", gpt, 4,
                          "--set distributed.strategy=mesh --set parallel.dp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true");
}

}  // namespace tessera
