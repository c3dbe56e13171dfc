// launch(): real worker processes (/bin/sh scripts). The env contract per rank, prefixed output,
// failure propagation (a failed rank stops a sibling that would run for a minute), a worker killed
// by a signal, SIGKILL after the grace period, a job timeout, and SIGINT/SIGTERM forwarding.
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <csignal>
#include <map>
#include <sstream>
#include <sys/wait.h>

#include "tessera/dist/launcher/launcher.h"
#include "tessera/dist/launcher/worker_process.h"
#include "testing/expect.h"
#include "dist/launcher/launch_testing.h"

using namespace tessera;
using namespace tessera::dist::launcher;
using tessera::testing::Captured;
using tessera::testing::expect_error;
using tessera::testing::launch_captured;
using tessera::testing::sh_job;
using tessera::testing::TempDir;

namespace {

// Each worker prints its whole contract on one line.
constexpr const char* kPrintEnv =
    "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $NODE_RANK $MASTER_ADDR $MASTER_PORT "
    "$TESSERA_JOB_TOKEN $TESSERA_NUM_THREADS\"";

// "[rank R] rest" lines -> rest by R.
std::map<int, std::string> lines_by_rank(const std::string& text) {
  std::map<int, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    int rank = -1, used = 0;
    EXPECT_EQ(std::sscanf(line.c_str(), "[rank %d] %n", &rank, &used), 1) << line;
    out[rank] += line.substr(static_cast<size_t>(used));
  }
  return out;
}

// The lines of `text` that start with "[rank R] ", in order, newlines kept.
std::string lines_of(const std::string& text, int rank) {
  std::string prefix = "[rank " + std::to_string(rank) + "] ", out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) out += line + "\n";
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST(Launch, SetsTheEnvContractPerRank) {
  TempDir dir;
  LaunchOptions o = sh_job(3, kPrintEnv);
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "198.18.2.3";
  o.master_port = 29555;
  o.job_token = "feedface";
  o.threads_per_worker = 2;
  Captured c = launch_captured(o, dir);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.message << c.err;
  EXPECT_EQ(c.result.message, "");
  auto lines = lines_by_rank(c.out);
  ASSERT_EQ(lines.size(), 3u) << c.out;
  for (int local = 0; local < 3; ++local) {
    int rank = 3 + local;
    EXPECT_EQ(lines[rank], std::to_string(rank) + " 6 " + std::to_string(local) + " 3 1 198.18.2.3 29555 feedface 2");
  }
}

TEST(Launch, OpenMpThreadsFollowTheThreadsPerWorkerUnlessTheLauncherHasThem) {
  TempDir dir;
  LaunchOptions o = sh_job(2, "echo \"$OMP_NUM_THREADS\"");
  o.threads_per_worker = 3;
  Captured c = launch_captured(o, dir);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.message << c.err;
  auto lines = lines_by_rank(c.out);
  ASSERT_EQ(lines.size(), 2u) << c.out;
  // The suite's sanitizer passes run with OMP_NUM_THREADS set: then it is passed on unchanged.
  const char* own = std::getenv("OMP_NUM_THREADS");
  for (int rank : {0, 1}) EXPECT_EQ(lines[rank], own != nullptr ? std::string(own) : "3");
}

// Local workers that fill the launcher's cores exactly get a slice each (worker_process.h's
// core_binding); a job that would not fill them, or TESSERA_BIND_CORES=0, is left to the scheduler.
// A worker reads its own mask from /proc.
TEST(Launch, LocalWorkersThatFillTheCoresAreBoundToTheirOwn) {
  cpu_set_t mask;
  ASSERT_EQ(::sched_getaffinity(0, sizeof mask, &mask), 0);
  std::vector<int> usable;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) usable.push_back(c);
  if (usable.size() < 2 || usable.size() % 2 != 0) GTEST_SKIP() << "needs an even number of usable cores";
  const int half = static_cast<int>(usable.size()) / 2;
  auto binding = core_binding(2, half);
  ASSERT_EQ(binding.size(), 2u);
  EXPECT_EQ(binding[0], std::vector<int>(usable.begin(), usable.begin() + half));
  EXPECT_EQ(binding[1], std::vector<int>(usable.begin() + half, usable.end()));
  EXPECT_EQ(core_binding(2, half + 1), std::vector<std::vector<int>>(2));  // more threads than cores
  if (half > 1) {
    EXPECT_EQ(core_binding(2, 1), std::vector<std::vector<int>>(2));  // would leave cores idle
  }
  ::setenv("TESSERA_BIND_CORES", "0", 1);
  EXPECT_EQ(core_binding(2, half), std::vector<std::vector<int>>(2));
  ::unsetenv("TESSERA_BIND_CORES");
  if (usable.size() != 2) return;  // the launched check below reads single-core masks
  TempDir dir;
  LaunchOptions o = sh_job(2, "grep Cpus_allowed_list /proc/self/status | cut -f2");
  o.threads_per_worker = 1;
  Captured c = launch_captured(o, dir);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.message << c.err;
  auto lines = lines_by_rank(c.out);
  ASSERT_EQ(lines.size(), 2u) << c.out;
  EXPECT_EQ(lines[0], std::to_string(usable[0])) << c.out;
  EXPECT_EQ(lines[1], std::to_string(usable[1])) << c.out;
}

TEST(Launch, DefaultsOnNodeZero) {
  TempDir dir;
  Captured c = launch_captured(sh_job(2, kPrintEnv), dir);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.message << c.err;
  auto lines = lines_by_rank(c.out);
  ASSERT_EQ(lines.size(), 2u) << c.out;
  std::string token[2];
  int port[2], threads[2];
  for (int rank = 0; rank < 2; ++rank) {
    std::istringstream in(lines[rank]);
    int r, world, local, local_world, node;
    std::string addr;
    in >> r >> world >> local >> local_world >> node >> addr >> port[rank] >> token[rank] >> threads[rank];
    EXPECT_EQ(r, rank);
    EXPECT_EQ(world, 2);
    EXPECT_EQ(local, rank);
    EXPECT_EQ(local_world, 2);
    EXPECT_EQ(node, 0);
    EXPECT_EQ(addr, "127.0.0.1");
  }
  EXPECT_GT(port[0], 0);
  EXPECT_EQ(port[0], port[1]);
  EXPECT_EQ(token[0], token[1]);
  if (!std::getenv("TESSERA_JOB_TOKEN")) {
    EXPECT_EQ(token[0].size(), 32u);
    EXPECT_EQ(token[0].find_first_not_of("0123456789abcdef"), std::string::npos) << token[0];
  }
  int expected_threads;
  if (const char* env = std::getenv("TESSERA_NUM_THREADS")) {
    expected_threads = std::atoi(env);
  } else {
    cpu_set_t set;
    ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    expected_threads = std::max(1, CPU_COUNT(&set) / 2);
  }
  EXPECT_EQ(threads[0], expected_threads);
  EXPECT_EQ(threads[1], expected_threads);
}

TEST(Launch, PrefixesEachStreamPerRank) {
  TempDir dir;
  // Rank 1's last line has no newline: it must still come out, whole, at exit.
  Captured c = launch_captured(
      sh_job(2, "echo \"out $RANK\"; echo \"err $RANK\" >&2; printf 'second\\npartial %s' $RANK"), dir);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.message;
  for (int rank : {0, 1}) {
    std::string r = std::to_string(rank);
    std::string p = "[rank " + r + "] ";
    // Ranks interleave line by line; each rank's own lines keep their order.
    EXPECT_EQ(lines_of(c.out, rank), p + "out " + r + "\n" + p + "second\n" + p + "partial " + r + "\n") << c.out;
    EXPECT_EQ(lines_of(c.err, rank), p + "err " + r + "\n") << c.err;
  }
}

TEST(Launch, FailedRankStopsTheOthers) {
  TempDir dir;
  auto start = std::chrono::steady_clock::now();
  Captured c = launch_captured(sh_job(3, "if [ \"$RANK\" = 1 ]; then echo failing; exit 3; fi; sleep 60"), dir);
  EXPECT_LT(seconds_since(start), 30.0);  // sleep 60 was stopped, not waited for
  EXPECT_EQ(c.result.exit_code, 3);
  EXPECT_EQ(c.result.failed_rank, 1);
  EXPECT_TRUE(contains(c.result.message, "rank 1 (pid " + std::to_string(c.result.workers[1].pid) +
                                             ") exited with status 3; stopped the other 2 workers"))
      << c.result.message;
  EXPECT_FALSE(contains(c.result.message, "SIGKILL")) << c.result.message;
  EXPECT_TRUE(contains(c.out, "[rank 1] failing\n")) << c.out;
  for (int rank : {0, 2}) {
    int status = c.result.workers[rank].wait_status;
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "rank " << rank << " status " << status;
  }
}

TEST(Launch, WorkerKilledBySignalIsReported) {
  TempDir dir;
  Captured c = launch_captured(sh_job(2, "if [ \"$RANK\" = 0 ]; then kill -KILL $$; fi; sleep 60"), dir);
  EXPECT_EQ(c.result.exit_code, 128 + SIGKILL);
  EXPECT_EQ(c.result.failed_rank, 0);
  EXPECT_TRUE(contains(c.result.message, "rank 0 (pid " + std::to_string(c.result.workers[0].pid) +
                                             ") was killed by signal 9 (SIGKILL); stopped the other 1 worker"))
      << c.result.message;
}

TEST(Launch, SigkillsWorkersThatIgnoreSigterm) {
  TempDir dir;
  // Rank 0 ignores SIGTERM (and so does the sleep it execs); rank 1 fails once rank 0 is ready.
  std::string ready = (dir.path() / "ready").string();
  LaunchOptions o = sh_job(2, "if [ \"$RANK\" = 0 ]; then trap '' TERM; touch " + ready +
                                  "; exec sleep 60; fi; while [ ! -e " + ready + " ]; do sleep 0.01; done; exit 5");
  o.grace_period = std::chrono::milliseconds(200);
  Captured c = launch_captured(o, dir);
  EXPECT_EQ(c.result.exit_code, 5);
  EXPECT_TRUE(contains(c.result.message, "exited with status 5; stopped the other 1 worker; 1 worker did not exit "
                                         "within 0.2 s and got SIGKILL"))
      << c.result.message;
  EXPECT_TRUE(c.result.workers[0].sigkilled);
  EXPECT_TRUE(WIFSIGNALED(c.result.workers[0].wait_status) && WTERMSIG(c.result.workers[0].wait_status) == SIGKILL);
}

TEST(Launch, TimeoutStopsTheJob) {
  TempDir dir;
  LaunchOptions o = sh_job(2, "sleep 60");
  o.timeout = std::chrono::milliseconds(300);
  Captured c = launch_captured(o, dir);
  EXPECT_EQ(c.result.exit_code, 124);
  EXPECT_TRUE(c.result.timed_out);
  EXPECT_EQ(c.result.message, "timed out after 0.3 s; stopped 2 workers");
}

TEST(Launch, AllWorkersSucceeding) {
  TempDir dir;
  Captured c = launch_captured(sh_job(4, "exit 0"), dir);
  EXPECT_EQ(c.result.exit_code, 0);
  EXPECT_EQ(c.result.message, "");
  ASSERT_EQ(c.result.workers.size(), 4u);
  for (const auto& w : c.result.workers) EXPECT_EQ(w.wait_status, 0);
}

class LaunchForwards : public ::testing::TestWithParam<int> {};

TEST_P(LaunchForwards, SignalToEveryWorker) {
  int signal = GetParam();
  std::string name = signal == SIGINT ? "INT" : "TERM";
  TempDir dir;
  // Every worker traps the signal and reports it; once all traps are set (ready files), rank 0
  // sends the signal to the launcher, which is this test process ($PPID).
  std::string d = dir.path().string();
  std::string script = "trap 'echo got " + name + "; exit 0' " + name + "; touch " + d + "/ready$RANK; " +
                       "if [ \"$RANK\" = 0 ]; then while [ ! -e " + d + "/ready1 ] || [ ! -e " + d +
                       "/ready2 ]; do sleep 0.01; done; kill -" + name + " $PPID; fi; " +
                       "while :; do sleep 0.05; done";
  Captured c = launch_captured(sh_job(3, script), dir);
  EXPECT_EQ(c.result.received_signal, signal);
  EXPECT_EQ(c.result.exit_code, 128 + signal);
  EXPECT_EQ(c.result.message, "received SIG" + name + " and forwarded it to 3 workers");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(contains(c.out, "[rank " + std::to_string(rank) + "] got " + name + "\n")) << c.out;
    EXPECT_EQ(c.result.workers[rank].wait_status, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Signals, LaunchForwards, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) { return info.param == SIGINT ? "SIGINT" : "SIGTERM"; });

TEST(Launch, RejectsBadOptions) {
  expect_error<ValueError>([] { launch(sh_job(0, "true")); }, {"--nproc-per-node"});
  LaunchOptions no_program = sh_job(1, "true");
  no_program.command.clear();
  expect_error<ValueError>([&] { launch(no_program); }, {"no PROGRAM"});
  LaunchOptions second_node = sh_job(1, "true");
  second_node.nnodes = 2;
  second_node.node_rank = 1;
  second_node.job_token = "t";
  expect_error<ValueError>([&] { launch(second_node); }, {"--node-rank 1 needs --master-port"});
  if (!std::getenv("TESSERA_JOB_TOKEN")) {
    LaunchOptions multi = sh_job(1, "true");
    multi.nnodes = 2;
    expect_error<ValueError>([&] { launch(multi); }, {"TESSERA_JOB_TOKEN"});
  }
}

TEST(Launch, RejectsProgramsItCannotRun) {
  LaunchOptions missing = sh_job(2, "");
  missing.command = {"tessera-no-such-program"};
  expect_error<ValueError>([&] { launch(missing); }, {"'tessera-no-such-program' was not found in PATH"});
  // Executable but not a program: execve fails in the child, and the error comes back.
  TempDir dir;
  std::string garbage = (dir.path() / "garbage").string();
  { std::ofstream(garbage) << "\x01\x02 not a program\n"; }
  std::filesystem::permissions(garbage, std::filesystem::perms::owner_all);
  LaunchOptions bad = sh_job(2, "");
  bad.command = {garbage};
  expect_error<ValueError>([&] { launch(bad); }, {"cannot execute", "garbage", "Exec format error"});
}
