// The flight recorder in a real job: a rank that stops (SIGSTOP) mid-run is named by `tessera trace
// analyze` from the record its peer wrote within seconds, long before the collective timeout; a rank
// killed mid-run is named by the analysis `tessera train` prints as the job ends.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "testing/temp_dir.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using tessera::testing::fresh_dir;
using tessera::testing::read_text;

// DIR/config.toml: a two-worker MLP job writing to DIR/run, with a 60 s collective timeout and the
// fault `fault` (lines of [distributed]).
void write_job_config(const std::string& dir, const std::string& fault) {
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [32]\n[data]\ndataset = \"synthetic\"\n"
                                         "samples = 4096\ntest_samples = 64\nclasses = 4\n[train]\nepochs = 1\n"
                                         "batch_size = 16\nthreads = 1\nlog_every = 1000\noutput_dir = \"" << dir << "/run\"\n"
                                         "[distributed]\ntimeout_s = 60\n" << fault;
}

TEST(FlightRecorderProcess, AStoppedRankIsNamedWithinTenSecondsAndBeforeTheTimeout) {
  const std::string dir = fresh_dir("FlightRecorderProcess", "stopped");
  write_job_config(dir, "debug_stop_rank = 1\ndebug_stop_step = 5\n");
  const std::string log = dir + "/train.log", config = dir + "/config.toml";
  const pid_t job = ::fork();
  if (job == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(TESSERA_BINARY, TESSERA_BINARY, "train", config.c_str(), "--nproc", "2", nullptr);
    ::_exit(127);
  }
  // However the test ends, the job goes: the launcher, and with it (PR_SET_PDEATHSIG) the stopped rank.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{job};
  // The stop, then rank 0's record: each looked for every 20 ms, for at most 60 s and 10 s.
  const auto begin = Clock::now();
  while (read_text(log).find("stops itself (SIGSTOP)") == std::string::npos && Clock::now() - begin < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(read_text(log).find("stops itself (SIGSTOP)"), std::string::npos) << read_text(log);
  const auto stopped = Clock::now();
  const std::string flight = dir + "/run/flight";
  // A whole record: rank-*.json (the write goes through a temporary of another name, then a rename).
  auto written = [&] {
    if (!std::filesystem::is_directory(flight)) return false;
    for (const auto& e : std::filesystem::directory_iterator(flight))
      if (e.path().filename().string().rfind("rank-", 0) == 0 && e.path().extension() == ".json") return true;
    return false;
  };
  while (!written() && Clock::now() - stopped < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double after = std::chrono::duration<double>(Clock::now() - stopped).count();
  ASSERT_TRUE(written()) << "no flight record 10 s after the stop; " << read_text(log);
  EXPECT_LT(after, 10.0);
  const std::string out = dir + "/analyze.txt";
  ASSERT_EQ(std::system((std::string(TESSERA_BINARY) + " trace analyze " + flight + " > " + out + " 2>&1").c_str()), 0)
      << read_text(out);
  const std::string report = read_text(out);
  EXPECT_NE(report.find("rank 0 on "), std::string::npos) << report;
  EXPECT_NE(report.find("waiting in it for"), std::string::npos) << report;
  EXPECT_NE(report.find("MISSING from it:\n    rank 1: no flight record"), std::string::npos) << report;
  // The job itself is still waiting: the 60 s timeout has not ended it.
  EXPECT_EQ(::waitpid(job, nullptr, WNOHANG), 0) << read_text(log);
}

// A rank killed mid-run: the survivor's collective fails (its peer is gone), it writes its record, and
// `tessera train` itself prints what the records say, naming the missing rank, as the job ends.
TEST(FlightRecorderProcess, AKilledRanksJobEndsWithTheAnalysisNamingIt) {
  const std::string dir = fresh_dir("FlightRecorderProcess", "killed");
  write_job_config(dir, "debug_kill_rank = 1\ndebug_kill_step = 5\n");
  const std::string log = dir + "/train.log";
  const auto begin = Clock::now();
  const int status = std::system(("timeout -k 5 120 " + std::string(TESSERA_BINARY) + " train " + dir +
                                  "/config.toml --nproc 2 > " + log + " 2>&1").c_str());
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  const std::string text = read_text(log);
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_NE(WEXITSTATUS(status), 0) << text;
  EXPECT_NE(WEXITSTATUS(status), 124) << "timed out\n" << text;
  EXPECT_LT(seconds, 30.0) << "the survivor waited for its 60 s timeout\n" << text;
  const size_t analysis = text.find("tessera train: the ranks' flight records (tessera trace analyze " + dir + "/run/flight):");
  ASSERT_NE(analysis, std::string::npos) << text;
  EXPECT_NE(text.find("rank 1: no flight record", analysis), std::string::npos) << text;
}

}  // namespace
}  // namespace tessera
