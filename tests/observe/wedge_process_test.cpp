// The launcher's wedge watch in real jobs (dist/launcher/wedge_watch.h): a rank stopped by SIGSTOP,
// a rank that leaves out its step's collectives and a data loader that deadlocks are each reported
// by `tessera train --nproc 2` within seconds: every rank's state and stack (all threads,
// symbolised) and what the flight records say, long before any timeout ends the job; and
// `tessera trace stacks` asks a live job for the same report.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/temp_dir.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using tessera::testing::fresh_dir;
using tessera::testing::read_text;

// A two-worker MLP job of many short steps writing to DIR/run (120 s collective timeout), with the
// extra [distributed] lines `fault`, under `wedge_env` (TESSERA_DEBUG_WEDGE=... or empty). Its
// output goes to DIR/train.log; the job is killed when this ends, however the test does.
class WedgedJob {
 public:
  WedgedJob(const std::string& dir, const std::string& fault, const std::string& wedge_env) : dir_(dir) {
    std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [32]\n[data]\ndataset = \"synthetic\"\n"
                                           "samples = 8192\ntest_samples = 64\nclasses = 4\n[train]\nepochs = 1\n"
                                           "batch_size = 8\nthreads = 1\nlog_every = 100000\noutput_dir = \"" << dir << "/run\"\n"
                                           "[distributed]\ntimeout_s = 120\n" << fault;
    const std::string log = dir + "/train.log", config = dir + "/config.toml";
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("TESSERA_WEDGE_MIN_MS", "1000", 1);
      if (!wedge_env.empty()) ::putenv(const_cast<char*>(wedge_env.c_str()));
      ::execl(TESSERA_BINARY, TESSERA_BINARY, "train", config.c_str(), "--nproc", "2", nullptr);
      ::_exit(127);
    }
  }
  ~WedgedJob() {
    if (pid_ <= 0) return;
    // SIGTERM, so the launcher stops its workers and removes its job directory; SIGKILL after 30 s.
    for (pid_t p : worker_pids()) ::kill(p, SIGCONT);  // a stopped rank must see the end too
    ::kill(pid_, SIGTERM);
    const auto begin = Clock::now();
    while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (Clock::now() - begin > std::chrono::seconds(30)) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // The launcher's children: the workers.
  std::vector<pid_t> worker_pids() const {
    std::vector<pid_t> out;
    std::ifstream in("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) + "/children");
    for (pid_t p; in >> p;) out.push_back(p);
    return out;
  }
  std::string log() const { return read_text(dir_ + "/train.log"); }
  // Waits (looking every 20 ms, at most `limit`) for `text` in the log; the seconds it took.
  double wait_for(const std::string& text, std::chrono::seconds limit) const {
    const auto begin = Clock::now();
    while (log().find(text) == std::string::npos && Clock::now() - begin < limit)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return std::chrono::duration<double>(Clock::now() - begin).count();
  }
  bool running() const { return ::waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

constexpr const char* kReportEnd = "[wedge] every thread's stack: ";

// The text from the report that names `marker` to its end (a busy machine may have made an earlier
// report of a pause before the wedge); empty until there is one.
std::string report_with(const std::string& log, const std::string& marker) {
  const size_t at = log.find(marker);
  if (at == std::string::npos) return std::string();
  size_t begin = 0;  // the head of the report `marker` is in
  for (const char* head : {"[wedge] no rank finished", "[wedge] asked for"})
    if (const size_t h = log.rfind(head, at); h != std::string::npos) begin = std::max(begin, h);
  const size_t end = log.find(kReportEnd, at);
  if (end == std::string::npos) return std::string();
  return log.substr(begin, log.find('\n', end) - begin);
}

// The directory a report names for every thread's stack.
std::string stacks_dir(const std::string& report) {
  const size_t at = report.find(kReportEnd) + std::string(kReportEnd).size();
  return report.substr(at, report.find('\n', at) - at);
}

// Whether a stack tool is installed (the tests skip without one).
bool have_stack_tool() {
  return std::system("command -v eu-stack >/dev/null 2>&1 || command -v gdb >/dev/null 2>&1") == 0;
}

TEST(WedgeProcess, AStoppedRankIsReportedWithItsStateAndStacksWithinTenSeconds) {
  if (!have_stack_tool()) GTEST_SKIP() << "neither eu-stack (elfutils) nor gdb is installed";
  const std::string dir = fresh_dir("WedgeProcess", "stopped");
  WedgedJob job(dir, "debug_stop_rank = 1\ndebug_stop_step = 40\n", "");
  job.wait_for("stops itself (SIGSTOP)", std::chrono::seconds(60));
  ASSERT_NE(job.log().find("stops itself (SIGSTOP)"), std::string::npos) << job.log();
  const auto stopped = Clock::now();
  while (report_with(job.log(), "T (stopped)").empty() && Clock::now() - stopped < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double after = std::chrono::duration<double>(Clock::now() - stopped).count();
  const std::string log = job.log(), report = report_with(log, "T (stopped)");
  ASSERT_FALSE(report.empty()) << log;
  std::printf("from the stop to the end of the report: %.2f s\n", after);
  EXPECT_LT(after, 10.0) << log;
  EXPECT_NE(report.find("[wedge] no rank finished a training step for "), std::string::npos) << report;
  EXPECT_NE(report.find("[wedge] rank 1 (pid "), std::string::npos) << report;
  // Both ranks' main threads, symbolised: rank 0 waits in a collective, rank 1 in its raise().
  EXPECT_NE(report.find("main thread:\n[wedge]     #0 "), std::string::npos) << report;
  for (const char* rank : {"/rank-0.stacks.txt", "/rank-1.stacks.txt"})
    EXPECT_NE(read_text(stacks_dir(report) + rank).find("tessera::train::Trainer::"), std::string::npos) << rank;
  EXPECT_NE(report.find("rank 1: no flight record"), std::string::npos) << report;
  EXPECT_TRUE(job.running()) << "the job ended; the report should come long before its 120 s timeout";
  // On demand, from another process: the same report, asked for.
  const std::string out = dir + "/stacks.txt";
  ASSERT_EQ(std::system((std::string(TESSERA_BINARY) + " trace stacks " + dir + "/run > " + out + " 2>&1").c_str()), 0)
      << read_text(out);
  const std::string asked = read_text(out);
  EXPECT_NE(asked.find("[wedge] asked for (SIGUSR2 to the launcher, pid "), std::string::npos) << asked;
  EXPECT_NE(asked.find("T (stopped)"), std::string::npos) << asked;
}

TEST(WedgeProcess, ARankThatLeavesOutItsStepsCollectivesIsNamedByItsStackAndTheFlightRecords) {
  if (!have_stack_tool()) GTEST_SKIP() << "neither eu-stack (elfutils) nor gdb is installed";
  const std::string dir = fresh_dir("WedgeProcess", "step");
  WedgedJob job(dir, "", "TESSERA_DEBUG_WEDGE=step:1:40");
  job.wait_for("block_as_a_wedged_rank", std::chrono::seconds(60));
  job.wait_for("MISSING from it", std::chrono::seconds(10));
  const std::string log = job.log(), report = report_with(log, "block_as_a_wedged_rank");
  ASSERT_FALSE(report.empty()) << log;
  EXPECT_NE(report.find("[wedge] the flight records"), std::string::npos) << report;
  EXPECT_NE(report.find("MISSING from it"), std::string::npos) << report;
  EXPECT_NE(read_text(stacks_dir(report) + "/rank-1.stacks.txt").find("block_as_a_wedged_rank"), std::string::npos)
      << report;
}

TEST(WedgeProcess, ADeadlockedDataLoaderIsNamedByTheStacks) {
  if (!have_stack_tool()) GTEST_SKIP() << "neither eu-stack (elfutils) nor gdb is installed";
  const std::string dir = fresh_dir("WedgeProcess", "loader");
  WedgedJob job(dir, "", "TESSERA_DEBUG_WEDGE=loader:1:40");
  job.wait_for("DataLoader::next", std::chrono::seconds(60));
  job.wait_for(kReportEnd, std::chrono::seconds(10));
  const std::string log = job.log(), report = report_with(log, "DataLoader::next");
  ASSERT_FALSE(report.empty()) << log;
  // Every thread's stack is in the report's directory: the loader's worker waits in run_worker.
  EXPECT_NE(read_text(stacks_dir(report) + "/rank-1.stacks.txt").find("DataLoader::run_worker"), std::string::npos)
      << report;
}

}  // namespace
}  // namespace tessera
