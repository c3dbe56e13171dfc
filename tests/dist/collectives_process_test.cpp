// Tier 3: real worker processes started by the launcher (tessera run), each joining with
// init_process_group, for every backend that runs under it and world sizes 1, 2, 3, 4 and 8; and
// the failure cases, where the test reads each surviving rank's error.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>

#include "dist/launcher/launch_testing.h"

namespace tessera {
namespace {

using testing::TempDir;

dist::launcher::LaunchOptions worker_job(int nproc, std::vector<std::string> args) {
  dist::launcher::LaunchOptions o;
  o.nproc_per_node = nproc;
  o.threads_per_worker = 1;
  o.timeout = std::chrono::minutes(3);
  o.command = {TESSERA_COLLECTIVE_WORKER};
  o.command.insert(o.command.end(), args.begin(), args.end());
  return o;
}

struct Case {
  std::string backend;
  int world;
};

class CollectivesAcrossProcesses : public ::testing::TestWithParam<Case> {};

TEST_P(CollectivesAcrossProcesses, EveryCollectiveMatchesTheSerialReference) {
  const Case& c = GetParam();
  TempDir dir;
  // Smaller sizes at 8 ranks: eight processes share two cores.
  std::vector<std::string> args = {"--backend", c.backend, "--sizes", "0", "1", "7", "1027"};
  args.push_back(c.world >= 8 ? "65537" : "262147");
  if (c.backend == "shm") args.push_back("--no-p2p");
  auto run = testing::launch_captured(worker_job(c.world, args), dir);
  EXPECT_EQ(run.result.exit_code, 0) << run.result.message << "\n" << run.out << run.err;
  for (int r = 0; r < c.world; ++r)
    EXPECT_NE(run.out.find("rank " + std::to_string(r) + " of " + std::to_string(c.world)), std::string::npos)
        << run.out;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (std::string b : {"gloo", "tcp", "shm", "auto"})
    for (int w : {1, 2, 3, 4, 8}) v.push_back({b, w});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectivesAcrossProcesses, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.backend + "_" + std::to_string(info.param.world); });

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Over shm the waiting thread runs the collective itself (Work::wait), over gloo the group's worker
// does: both must fail the same way.
class CollectiveFailureAcrossProcesses : public ::testing::TestWithParam<std::string> {};

TEST_P(CollectiveFailureAcrossProcesses, ARankThatNeverArrivesIsNamedByEveryOther) {
  TempDir dir;
  auto run = testing::launch_captured(
      worker_job(3, {"--backend", GetParam(), "--mode", "absent", "--victim", "2", "--timeout-ms", "1500"}), dir);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.message << "\n" << run.out << run.err;
  EXPECT_EQ(count(run.out, "TimeoutError"), 2) << run.out;
  EXPECT_EQ(count(run.out, "allreduce #1"), 2) << run.out;
  EXPECT_EQ(count(run.out, "never arrived at #1: rank 2"), 2) << run.out;
}

TEST_P(CollectiveFailureAcrossProcesses, ADeadRankFailsTheOthersPromptly) {
  TempDir dir;
  auto run = testing::launch_captured(
      worker_job(3, {"--backend", GetParam(), "--mode", "die", "--victim", "1", "--timeout-ms", "20000"}), dir);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.message << "\n" << run.out << run.err;
  EXPECT_EQ(count(run.out, "Error [allreduce #1"), 2) << run.out;
  EXPECT_EQ(count(run.out, "rank 1 on "), 2) << run.out;
  // Promptly: well before the 20 s timeout (the peer's sockets closed).
  std::smatch m;
  std::string out = run.out;
  std::regex after("failed after ([0-9]+) ms");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), after); it != std::sregex_iterator(); ++it)
    EXPECT_LT(std::stoi((*it)[1]), 15000) << run.out;
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectiveFailureAcrossProcesses, ::testing::Values("gloo", "shm"));

TEST(CollectiveFailureDebugMode, DebugModeReportsAMismatchRankByRank) {
  TempDir dir;
  auto run = testing::launch_captured(
      worker_job(3, {"--backend", "gloo", "--mode", "mismatch", "--victim", "1", "--timeout-ms", "20000"}), dir);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.message << "\n" << run.out << run.err;
  EXPECT_EQ(count(run.out, "ValueError"), 3) << run.out;
  EXPECT_EQ(count(run.out, "rank 1: allreduce (sum, float32 x 17)"), 3) << run.out;
  EXPECT_EQ(count(run.out, "rank 0: allreduce (sum, float32 x 16)"), 3) << run.out;
}

// The always-on collective check, without debug mode: both ranks of a job call broadcast naming the
// other as root, so each waits to receive and the backend alone would hang until the 60 s timeout.
// Each rank must fail within 5 s with a ValueError naming both calls and where they were made, and
// the job must end soon after (the stuck ranks exit instead of waiting out the timeout).
class CollectiveCheckAcrossProcesses : public ::testing::TestWithParam<std::string> {};

TEST_P(CollectiveCheckAcrossProcesses, ADesyncFailsEveryRankWithinFiveSecondsNamingBothCalls) {
  TempDir dir;
  const auto begin = std::chrono::steady_clock::now();
  auto run = testing::launch_captured(
      worker_job(2, {"--backend", GetParam(), "--mode", "desync", "--timeout-ms", "60000"}), dir);
  const double job_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_EQ(count(run.out, "ValueError [collective check] collective #1 differs across ranks"), 2) << run.out << run.err;
  for (const char* call : {"called broadcast (root 1, float32 x 16) at tests/dist/collective_worker_main.cpp:",
                           "called broadcast (root 0, float32 x 16) at tests/dist/collective_worker_main.cpp:"})
    EXPECT_EQ(count(run.out, call), 2) << run.out;
  std::regex after("rank ([0-9]) failed after ([0-9]+) ms");
  int reported = 0;
  for (auto it = std::sregex_iterator(run.out.begin(), run.out.end(), after); it != std::sregex_iterator(); ++it, ++reported)
    EXPECT_LT(std::stoi((*it)[2]), 5000) << run.out;
  EXPECT_EQ(reported, 2) << run.out;
  EXPECT_LT(job_seconds, 30.0) << "the stuck ranks waited for the timeout\n" << run.out << run.err;
}

INSTANTIATE_TEST_SUITE_P(Backends, CollectiveCheckAcrossProcesses, ::testing::Values("gloo", "tcp", "shm"));

}  // namespace
}  // namespace tessera
