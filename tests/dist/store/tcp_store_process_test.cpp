// Real processes: forked children connect to the parent's store as ranks and add to one counter;
// a child killed while it waits leaves the server serving. The parent never waits unboundedly.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "store_test_helpers.h"

namespace tessera::dist {
namespace {

using namespace std::chrono_literals;
using testing::LogCapture;

// Runs `body` in a forked child, which exits 0 on success and 1 on any exception. _exit skips the
// parent's atexit handlers and gtest's state, which the child shares but must not run.
template <typename F>
pid_t fork_child(F&& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int code = 0;
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", int(::getpid()), e.what());
      code = 1;
    }
    ::_exit(code);
  }
  return pid;
}

// waitpid with a deadline; kills the child and returns -1 if it does not exit in time.
int wait_for_exit(pid_t pid, std::chrono::milliseconds within) {
  auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(2ms);  // polling the exit status, not synchronising the test
  }
}

TEST(TcpStoreProcessTest, ForkedRanksAddToOneCounter) {
  LogCapture log;
  TcpStoreServer server(testing::server_options(log));
  constexpr int kChildren = 4, kAddsEach = 25;
  std::vector<pid_t> pids;
  for (int r = 0; r < kChildren; ++r) {
    pid_t pid = fork_child([&, r] {
      TcpStore s(testing::client_options(server, r));
      for (int i = 0; i < kAddsEach; ++i) s.add("counter", 1);
      s.set("done/" + std::to_string(r), std::string("ok"));
    });
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  TcpStore parent(testing::client_options(server, kChildren));
  std::vector<std::string> done;
  for (int r = 0; r < kChildren; ++r) done.push_back("done/" + std::to_string(r));
  for (pid_t pid : pids) EXPECT_EQ(wait_for_exit(pid, 10s), 0) << "child " << pid;
  parent.wait(done, 1s);
  EXPECT_EQ(parent.add("counter", 0), kChildren * kAddsEach);
  EXPECT_EQ(log.joined(), "");
}

TEST(TcpStoreProcessTest, KilledWaitingRankDoesNotDisturbTheStore) {
  LogCapture log;
  TcpStoreServer server(testing::server_options(log));
  pid_t pid = fork_child([&] {
    TcpStore s(testing::client_options(server, 1));
    s.set("child_ready", std::string("1"));
    s.wait({"never"}, 30s);
  });
  ASSERT_GT(pid, 0);
  TcpStore parent(testing::client_options(server, 0));
  parent.wait({"child_ready"}, 10s);
  ::kill(pid, SIGKILL);
  EXPECT_EQ(wait_for_exit(pid, 10s), 128 + SIGKILL);
  parent.set("never", std::string("now"));
  EXPECT_EQ(parent.get_string("never"), "now");
  EXPECT_EQ(log.joined(), "");
}

}  // namespace
}  // namespace tessera::dist
