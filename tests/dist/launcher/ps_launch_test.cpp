// launch() of a parameter-server job (servers_per_node > 0): real /bin/sh processes. The contract
// of servers and workers, prefixes, and the policy that a failing worker does not stop the job
// while a failing server does. Where a process must outlive a failed worker it waits for the
// launcher's notice about that worker in the captured stderr (synchronisation inside the job; a
// launcher that stopped the job instead would SIGTERM it, and the job timeout bounds the rest).
#include <gtest/gtest.h>

#include <sched.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <sys/wait.h>

#include "dist/launcher/launch_testing.h"
#include "tessera/dist/launcher/launcher.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::dist::launcher;
using tessera::testing::Captured;
using tessera::testing::expect_error;
using tessera::testing::launch_captured;
using tessera::testing::sh_job;
using tessera::testing::TempDir;

namespace {

LaunchOptions ps_job(int servers, int workers, const std::string& script) {
  LaunchOptions o = sh_job(workers, script);
  o.servers_per_node = servers;
  o.timeout = std::chrono::seconds(60);  // a wrong policy fails the test instead of hanging it
  return o;
}

// The rest of each line of `text` that starts with `prefix`, e.g. "[server 1] ", lines joined by '\n'.
std::string lines_of(const std::string& text, const std::string& prefix) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) out += (out.empty() ? "" : "\n") + line.substr(prefix.size());
  return out;
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Sets environment variables of this (the launcher's) process for one test, then restores them.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& variables) {
    for (const auto& [name, value] : variables) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old) ::setenv(name.c_str(), old->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// Waits, inside the job, until the launcher's notice about n failed workers is in stderr.txt.
std::string wait_for_notices(const TempDir& dir, int n) {
  return "while [ \"$(grep -c 'goes on without it' " + (dir.path() / "stderr.txt").string() + ")\" -lt " +
         std::to_string(n) + " ]; do sleep 0.01; done; ";
}

constexpr const char* kPrintEnv =
    "echo \"${TESSERA_ROLE-none} ${TESSERA_SERVER_RANK-none} ${TESSERA_NUM_SERVERS-none} "
    "${TESSERA_NUM_WORKERS-none} ${RANK-none} ${WORLD_SIZE-none} ${LOCAL_RANK-none} ${LOCAL_WORLD_SIZE-none} "
    "$NODE_RANK $MASTER_ADDR $MASTER_PORT $TESSERA_JOB_TOKEN $TESSERA_NUM_THREADS\"";

}  // namespace

TEST(LaunchPs, SetsTheContractOfServersAndWorkers) {
  // The launcher's own environment looks like a rank of another job: servers must not inherit it.
  ScopedEnv outer({{"RANK", "77"}, {"WORLD_SIZE", "99"}, {"LOCAL_RANK", "5"}, {"LOCAL_WORLD_SIZE", "9"},
                   {"TESSERA_NUM_WORKERS", "42"}, {"TESSERA_SERVER_RANK", "8"}});
  TempDir dir;
  LaunchOptions o = ps_job(2, 3, kPrintEnv);
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "198.18.2.3";
  o.master_port = 29555;
  o.job_token = "feedface";
  o.threads_per_worker = 2;
  Captured c = launch_captured(o, dir);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.message << c.err;
  const std::string common = " 1 198.18.2.3 29555 feedface 2";
  for (int i = 0; i < 2; ++i) {
    int server = 2 + i;  // node 1's servers of 2 per node
    EXPECT_EQ(lines_of(c.out, "[server " + std::to_string(server) + "] "),
              "server " + std::to_string(server) + " 4 6 none none none none" + common)
        << c.out;
  }
  for (int local = 0; local < 3; ++local) {
    int rank = 3 + local;
    EXPECT_EQ(lines_of(c.out, "[rank " + std::to_string(rank) + "] "),
              "worker none 4 none " + std::to_string(rank) + " 6 " + std::to_string(local) + " 3" + common)
        << c.out;
  }
  ASSERT_EQ(c.result.servers.size(), 2u);
  ASSERT_EQ(c.result.workers.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(c.result.servers[i].server);
    EXPECT_EQ(c.result.servers[i].rank, 2 + i);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(c.result.workers[i].server);
    EXPECT_EQ(c.result.workers[i].rank, 3 + i);
  }
}

TEST(LaunchPs, ThreadDefaultCountsServersAndWorkers) {
  TempDir dir;
  Captured c = launch_captured(ps_job(1, 2, "echo $TESSERA_NUM_THREADS"), dir);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.message << c.err;
  std::string expected;
  if (const char* env = std::getenv("TESSERA_NUM_THREADS")) {
    expected = env;
  } else {
    cpu_set_t set;
    ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    expected = std::to_string(std::max(1, CPU_COUNT(&set) / 3));
  }
  for (const char* prefix : {"[server 0] ", "[rank 0] ", "[rank 1] "})
    EXPECT_EQ(lines_of(c.out, prefix), expected) << prefix;
}

TEST(LaunchPs, PlainJobDropsAnInheritedRole) {
  ScopedEnv outer({{"TESSERA_ROLE", "server"}, {"TESSERA_SERVER_RANK", "0"}, {"TESSERA_NUM_SERVERS", "1"},
                   {"TESSERA_NUM_WORKERS", "1"}});
  TempDir dir;
  Captured c = launch_captured(
      sh_job(1, "echo \"${TESSERA_ROLE-none} ${TESSERA_SERVER_RANK-none} ${TESSERA_NUM_SERVERS-none} "
                "${TESSERA_NUM_WORKERS-none} $RANK\""),
      dir);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.message << c.err;
  EXPECT_EQ(c.out, "[rank 0] none none none none 0\n");
  EXPECT_TRUE(c.result.servers.empty());
}

TEST(LaunchPs, AllSucceeding) {
  TempDir dir;
  Captured c = launch_captured(
      ps_job(2, 2, "if [ \"$TESSERA_ROLE\" = server ]; then echo \"serving $TESSERA_SERVER_RANK\"; "
                   "else echo \"working $RANK\" >&2; fi"),
      dir);
  EXPECT_EQ(c.result.exit_code, 0);
  EXPECT_EQ(c.result.message, "");
  EXPECT_EQ(c.result.failed_rank, -1);
  EXPECT_EQ(c.result.failed_server, -1);
  EXPECT_TRUE(c.result.failed_workers.empty());
  for (int i : {0, 1}) {
    std::string n = std::to_string(i);
    EXPECT_EQ(lines_of(c.out, "[server " + n + "] "), "serving " + n) << c.out;
    EXPECT_EQ(lines_of(c.err, "[rank " + n + "] "), "working " + n) << c.err;
  }
  ASSERT_EQ(c.result.servers.size(), 2u);
  ASSERT_EQ(c.result.workers.size(), 2u);
  for (const auto& p : c.result.servers) EXPECT_EQ(p.wait_status, 0);
  for (const auto& p : c.result.workers) EXPECT_EQ(p.wait_status, 0);
}

struct WorkerFailure {
  const char* name;
  const char* command;      // how rank 1 fails
  const char* description;  // as the launcher says it
  friend void PrintTo(const WorkerFailure& f, std::ostream* os) { *os << f.command; }
};

class LaunchPsWorkerFailure : public ::testing::TestWithParam<WorkerFailure> {};

TEST_P(LaunchPsWorkerFailure, DoesNotStopTheJob) {
  TempDir dir;
  // Rank 1 fails; the server and ranks 0 and 2 carry on only after the launcher has reaped it
  // (its notice is out), so they were demonstrably not stopped.
  Captured c = launch_captured(ps_job(1, 3, std::string("if [ \"$RANK\" = 1 ]; then echo failing; ") +
                                                GetParam().command + "; fi; " + wait_for_notices(dir, 1) +
                                                "echo 'carried on'"),
                               dir);
  EXPECT_EQ(c.result.exit_code, 0) << c.result.message << c.err;
  EXPECT_EQ(c.result.message, "");
  EXPECT_EQ(c.result.failed_workers, std::vector<int>{1});
  EXPECT_EQ(c.result.failed_rank, -1);
  EXPECT_EQ(c.result.failed_server, -1);
  EXPECT_FALSE(c.result.timed_out);
  ASSERT_EQ(c.result.workers.size(), 3u);
  std::string notice = "tessera run: worker rank 1 (pid " + std::to_string(c.result.workers[1].pid) + ") " +
                       GetParam().description + "; a parameter-server job goes on without it\n";
  EXPECT_EQ(count_of(c.err, notice), 1) << c.err;
  EXPECT_EQ(lines_of(c.out, "[rank 1] "), "failing");
  for (const char* prefix : {"[server 0] ", "[rank 0] ", "[rank 2] "})
    EXPECT_EQ(lines_of(c.out, prefix), "carried on") << prefix << "\n" << c.out;
  EXPECT_EQ(c.result.servers[0].wait_status, 0);
  EXPECT_EQ(c.result.workers[0].wait_status, 0);
  EXPECT_EQ(c.result.workers[2].wait_status, 0);
}

INSTANTIATE_TEST_SUITE_P(LaunchPs, LaunchPsWorkerFailure,
                         ::testing::Values(WorkerFailure{"Exit3", "exit 3", "exited with status 3"},
                                           WorkerFailure{"Sigkill", "kill -KILL $$",
                                                         "was killed by signal 9 (SIGKILL)"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(LaunchPs, EveryWorkerFailingFailsTheJobWithTheFirst) {
  TempDir dir;
  // Rank 0 fails first; rank 1 fails after the launcher has reported rank 0; the server waits for both.
  Captured c = launch_captured(ps_job(1, 2, "if [ \"$RANK\" = 0 ]; then exit 3; fi; " + wait_for_notices(dir, 1) +
                                                "if [ \"$RANK\" = 1 ]; then exit 4; fi; " + wait_for_notices(dir, 2)),
                               dir);
  EXPECT_EQ(c.result.exit_code, 3);
  EXPECT_EQ(c.result.failed_workers, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.result.failed_rank, -1);
  EXPECT_EQ(c.result.message, "every worker failed (2 workers); the first, rank 0 (pid " +
                                  std::to_string(c.result.workers[0].pid) + ") exited with status 3");
  EXPECT_EQ(c.result.servers[0].wait_status, 0);
}

TEST(LaunchPs, FailedServerStopsTheJob) {
  TempDir dir;
  auto start = std::chrono::steady_clock::now();
  Captured c = launch_captured(
      ps_job(2, 2, "if [ \"$TESSERA_SERVER_RANK\" = 0 ]; then echo failing; exit 5; fi; sleep 60"), dir);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
  EXPECT_EQ(c.result.exit_code, 5);
  EXPECT_EQ(c.result.failed_server, 0);
  EXPECT_EQ(c.result.failed_rank, 0);
  EXPECT_TRUE(c.result.failed_workers.empty());  // stopped workers are not failed ones
  EXPECT_EQ(c.result.message, "server 0 (pid " + std::to_string(c.result.servers[0].pid) +
                                  ") exited with status 5; stopped the other 3 processes");
  EXPECT_EQ(lines_of(c.out, "[server 0] "), "failing");
  EXPECT_FALSE(contains(c.err, "goes on without it")) << c.err;
  for (const auto* p : {&c.result.servers[1], &c.result.workers[0], &c.result.workers[1]})
    EXPECT_TRUE(WIFSIGNALED(p->wait_status) && WTERMSIG(p->wait_status) == SIGTERM) << "pid " << p->pid;
}

TEST(LaunchPs, ServerThatCannotGoOnWithoutAWorkerFailsTheJob) {
  TempDir dir;
  // A synchronous server: it needs every worker, so when rank 1 is gone it exits 7, which stops
  // rank 0 (it would run for a minute).
  Captured c = launch_captured(ps_job(1, 2, "if [ \"$RANK\" = 1 ]; then exit 3; fi; "
                                            "if [ \"$TESSERA_ROLE\" = server ]; then " +
                                                wait_for_notices(dir, 1) + "exit 7; fi; sleep 60"),
                               dir);
  EXPECT_EQ(c.result.exit_code, 7);
  EXPECT_EQ(c.result.failed_server, 0);
  EXPECT_EQ(c.result.failed_workers, std::vector<int>{1});
  EXPECT_EQ(c.result.message, "server 0 (pid " + std::to_string(c.result.servers[0].pid) +
                                  ") exited with status 7; stopped the other 1 process");
  EXPECT_TRUE(WIFSIGNALED(c.result.workers[0].wait_status) && WTERMSIG(c.result.workers[0].wait_status) == SIGTERM);
}

TEST(LaunchPs, TimeoutStopsServersAndWorkers) {
  TempDir dir;
  LaunchOptions o = ps_job(1, 1, "sleep 60");
  o.timeout = std::chrono::milliseconds(300);
  Captured c = launch_captured(o, dir);
  EXPECT_EQ(c.result.exit_code, 124);
  EXPECT_EQ(c.result.message, "timed out after 0.3 s; stopped 2 processes");
}

TEST(LaunchPs, RejectsANegativeServerCount) {
  LaunchOptions o = ps_job(-1, 1, "true");
  expect_error<ValueError>([&] { launch(o); }, {"--servers", "-1"});
}
