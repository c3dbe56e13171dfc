// Real processes: forked children connect to the parent's store as ranks and add to one counter;
// a child killed while it waits leaves the server serving. The parent never waits unboundedly.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <vector>
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

// A rank forked before the parent starts any thread (the store server's): a child forked from a
// process with other threads inherits whatever lock one of them held at that instant (a suite run
// under ASan: the child never exited, waiting on such a lock) and may wait on it forever. It learns
// the server's port through a pipe, and gives up after 30 s without it.
struct ForkedRank {
  pid_t pid = -1;
  int port_pipe = -1;  // the parent's end
};

template <typename F>
ForkedRank fork_rank(F&& body) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = fork_child([&] {
    ::close(fds[1]);
    pollfd p{fds[0], POLLIN, 0};
    uint16_t port = 0;
    if (::poll(&p, 1, 30000) != 1 || ::read(fds[0], &port, sizeof port) != sizeof port)
      throw std::runtime_error("no port from the parent within 30 s");
    body(port);
  });
  ::close(fds[0]);
  return {pid, fds[1]};
}

void send_port(ForkedRank& rank, uint16_t port) {
  EXPECT_EQ(::write(rank.port_pipe, &port, sizeof port), static_cast<ssize_t>(sizeof port));
  ::close(rank.port_pipe);
}

TcpStoreOptions rank_options(uint16_t port, int rank) {
  TcpStoreOptions o;
  o.port = port;
  o.token = testing::kToken;
  o.rank = rank;
  o.timeout = std::chrono::seconds(10);
  o.connect_timeout = std::chrono::seconds(10);
  return o;
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
  constexpr int kChildren = 4, kAddsEach = 25;
  std::vector<ForkedRank> ranks;
  for (int r = 0; r < kChildren; ++r) {
    ranks.push_back(fork_rank([r](uint16_t port) {
      TcpStore s(rank_options(port, r));
      for (int i = 0; i < kAddsEach; ++i) s.add("counter", 1);
      s.set("done/" + std::to_string(r), std::string("ok"));
    }));
    ASSERT_GT(ranks.back().pid, 0);
  }
  LogCapture log;
  TcpStoreServer server(testing::server_options(log));
  for (auto& rank : ranks) send_port(rank, server.port());
  TcpStore parent(testing::client_options(server, kChildren));
  std::vector<std::string> done;
  for (int r = 0; r < kChildren; ++r) done.push_back("done/" + std::to_string(r));
  for (const auto& rank : ranks) EXPECT_EQ(wait_for_exit(rank.pid, 10s), 0) << "child " << rank.pid;
  parent.wait(done, 1s);
  EXPECT_EQ(parent.add("counter", 0), kChildren * kAddsEach);
  EXPECT_EQ(log.joined(), "");
}

TEST(TcpStoreProcessTest, KilledWaitingRankDoesNotDisturbTheStore) {
  ForkedRank child = fork_rank([](uint16_t port) {
    TcpStore s(rank_options(port, 1));
    s.set("child_ready", std::string("1"));
    s.wait({"never"}, 30s);
  });
  const pid_t pid = child.pid;
  ASSERT_GT(pid, 0);
  LogCapture log;
  TcpStoreServer server(testing::server_options(log));
  send_port(child, server.port());
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
