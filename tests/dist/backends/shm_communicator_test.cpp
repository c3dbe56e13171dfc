// The shm backend: threads as ranks over one real shared segment per group (tier 2), every
// collective and send/recv against the serial reference at world sizes 1-8, with the default chunk
// and with a one-page chunk (hundreds of double-buffered rounds per call); point-to-point's
// matching, streaming and errors; subgroups; the failure contract (a rank that never arrives, a
// peer process that exits, ranks on different machines).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "dist/collective_suite.h"
#include "tessera/dist/backends/shm/shm_communicator.h"
#include "tessera/dist/backends/shm/shm_reduce.h"
#include "tessera/dist/store/tcp_store.h"
#include "tessera/dist/store/tcp_store_server.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using dist::ProcessGroup;
using dist::ReduceOp;

std::string joined(const std::vector<std::string>& failures) {
  std::string s;
  for (const auto& f : failures) s += f + "\n";
  return s;
}

dist::ProcessGroupOptions long_timeout() {
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);  // a failing test fails instead of hanging
  return o;
}

testing::SuiteOptions sized(std::vector<int64_t> sizes = {0, 1, 7, 1027, 786433}) {
  testing::SuiteOptions o;
  o.sizes = std::move(sizes);
  return o;
}

// Sets TESSERA_SHM_CHUNK_BYTES for the communicators made in its scope (rank 0 reads it).
class ChunkBytes {
 public:
  explicit ChunkBytes(const char* value) { ::setenv("TESSERA_SHM_CHUNK_BYTES", value, 1); }
  ~ChunkBytes() { ::unsetenv("TESSERA_SHM_CHUNK_BYTES"); }
};

class ShmCollectives : public ::testing::TestWithParam<int> {};

TEST_P(ShmCollectives, EveryCollectiveMatchesTheSerialReference) {
  // 786433 float32 (3 MiB + 4 bytes) is several 1 MiB rounds with a ragged last one.
  auto failures = testing::run_suite_on_threads(GetParam(), dist::make_shm_communicator, sized(), long_timeout());
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST_P(ShmCollectives, OnePageChunksStreamManyRounds) {
  // 4 KiB chunks: 16411 float32 take 17+ rounds per allreduce and reduce_scatter pieces of
  // 4096 / world bytes, so both slot buffers are reused many times within one call.
  ChunkBytes chunk("4096");
  auto failures =
      testing::run_suite_on_threads(GetParam(), dist::make_shm_communicator, sized({3, 1000, 16411}), long_timeout());
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmCollectives, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return "world_" + std::to_string(info.param); });

TEST(ShmCollectives, ManyCollectivesBackToBackStayInStep) {
  // Alternates collectives that use the slots differently (broadcast skips the free-buffer wait
  // on non-roots, barrier uses no slot), so a round-numbering slip would corrupt a later result.
  testing::run_on_threads(
      3, dist::make_shm_communicator,
      [](ProcessGroup& group) {
        for (int i = 0; i < 200; ++i) {
          Tensor t = full({2049}, static_cast<float>(group.rank() + i));
          group.allreduce(t)->wait();
          ASSERT_EQ(t.to_vector<float>()[2048], static_cast<float>(3 * i + 3)) << "iteration " << i;
          Tensor b = full({100}, static_cast<float>(group.rank() == i % 3 ? i : -1));
          group.broadcast(b, i % 3)->wait();
          ASSERT_EQ(b.to_vector<float>()[99], static_cast<float>(i));
          if (i % 7 == 0) group.barrier()->wait();
        }
      },
      long_timeout());
}

TEST(ShmCollectives, QueuedCollectivesWaitedInReverseRunInIssueOrder) {
  // Work::wait() runs a queued collective on the waiting thread, and those queued before it first:
  // waiting on the last of 64 first must still run them in the order issued, on every rank.
  testing::run_on_threads(
      3, dist::make_shm_communicator,
      [](ProcessGroup& group) {
        for (int round = 0; round < 20; ++round) {
          std::vector<Tensor> tensors;
          std::vector<dist::WorkPtr> works;
          for (int i = 0; i < 64; ++i) {
            // Sizes on both sides of the one-round limit (64 KiB), and Avg as well as Sum.
            tensors.push_back(full({i % 2 == 0 ? 5 : 20000}, static_cast<float>(group.rank() + i)));
            works.push_back(group.allreduce(tensors.back(), i % 3 == 0 ? ReduceOp::Avg : ReduceOp::Sum));
          }
          for (int i = 63; i >= 0; --i) works[static_cast<size_t>(i)]->wait();
          for (int i = 0; i < 64; ++i) {
            const float sum = static_cast<float>(3 * i + 3);
            ASSERT_EQ(tensors[static_cast<size_t>(i)].to_vector<float>().back(), i % 3 == 0 ? sum / 3 : sum)
                << "round " << round << ", collective " << i;
          }
        }
      },
      long_timeout());
}

TEST(ShmCollectives, BFloat16MaxMinAndInt64Min) {
  testing::run_on_threads(
      3, dist::make_shm_communicator,
      [](ProcessGroup& group) {
        for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
          Tensor t = full({33}, static_cast<float>(group.rank()) - 1.0f, DType::BFloat16);
          group.allreduce(t, op)->wait();
          float want = op == ReduceOp::Max ? 1.0f : -1.0f;
          for (int64_t i = 0; i < 33; ++i) EXPECT_EQ(bf16_to_float(t.data<BFloat16>()[i]), want);
        }
        Tensor t = Tensor::empty({1001}, DType::Int64);
        for (int64_t i = 0; i < 1001; ++i) t.data<int64_t>()[i] = (int64_t{1} << 40) * (group.rank() - 1) + i;
        group.allreduce(t, ReduceOp::Min)->wait();
        for (int64_t i = 0; i < 1001; ++i) EXPECT_EQ(t.data<int64_t>()[i], -(int64_t{1} << 40) + i);
      },
      long_timeout());
}

TEST(ShmReduce, FoldsInRankOrderAndMayWriteOverASource) {
  // out aliases source 2 of 3: the fold must read every source of a block before writing.
  std::vector<float> a(5000), b(5000), c(5000), copy(5000);
  for (int i = 0; i < 5000; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 1.0f;
    c[i] = -static_cast<float>(i);
  }
  const void* src[3] = {a.data(), b.data(), c.data()};
  dist::detail::shm_reduce(c.data(), copy.data(), src, 3, 5000, DType::Float32, ReduceOp::Sum);
  for (int i = 0; i < 5000; ++i) {
    ASSERT_EQ(c[i], 1.0f) << i;
    ASSERT_EQ(copy[i], 1.0f) << i;
  }
}

TEST(ShmSubgroups, SplitGroupsRunTheSuiteOnTheirOwnSegments) {
  std::mutex mu;
  std::vector<std::string> failures;
  testing::run_on_threads(
      4, dist::make_shm_communicator,
      [&](ProcessGroup& group) {
        auto odd = group.new_group({3, 1});
        auto first_three = group.new_group({0, 1, 2});
        std::vector<std::string> mine;
        auto small = sized({0, 5, 1025, 300001});
        if (odd) {
          EXPECT_EQ(odd->size(), 2);
          EXPECT_EQ(odd->rank(), group.rank() == 1 ? 0 : 1);
          auto f = testing::run_collective_suite(*odd, small);
          mine.insert(mine.end(), f.begin(), f.end());
        }
        if (first_three) {
          auto f = testing::run_collective_suite(*first_three, small);
          mine.insert(mine.end(), f.begin(), f.end());
        }
        auto f = testing::run_collective_suite(group, small);
        mine.insert(mine.end(), f.begin(), f.end());
        std::lock_guard lock(mu);
        failures.insert(failures.end(), mine.begin(), mine.end());
      },
      long_timeout());
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST(ShmSetup, UnknownLocalSizeIsCheckedThroughTheStore) {
  // local_size 0: the ranks compare their machine identities; threads share one, so it works.
  auto local_unknown = [](const dist::BackendContext& c) {
    dist::BackendContext copy = c;
    copy.local_size = 0;
    return dist::make_shm_communicator(copy);
  };
  auto failures = testing::run_suite_on_threads(2, local_unknown, sized({0, 9}), long_timeout());
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST(ShmSetup, RanksOnSeveralMachinesAreAValueError) {
  dist::BackendContext c;
  c.store = std::make_shared<dist::HashStore>();
  c.rank = 0;
  c.size = 4;
  c.local_size = 2;
  try {
    dist::make_shm_communicator(c);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("one machine"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
}

TEST(ShmSetup, AGroupOfOneHasNoPeerToSendTo) {
  dist::BackendContext c;
  c.store = std::make_shared<dist::HashStore>();
  auto comm = dist::make_shm_communicator(c);
  float x = 0;
  EXPECT_THROW(comm->post_send(dist::Buffer{&x, 1, DType::Float32}, 0, 0), ValueError);
  EXPECT_THROW(comm->post_recv(dist::Buffer{&x, 1, DType::Float32}, 0, 0), ValueError);
}

// Rank r's message with tag t: n floats, each naming r, t and its index.
Tensor message(int r, int t, int64_t n) {
  Tensor x = Tensor::empty({n});
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(r * 1000000 + t * 1000 + i % 1000);
  return x;
}

void expect_message(const Tensor& got, int r, int t) {
  const auto want = message(r, t, got.numel()).to_vector<float>();
  EXPECT_EQ(got.to_vector<float>(), want) << "message from rank " << r << " tag " << t;
}

// Small rings (one page) make every message below stream through them in pieces.
class RingBytes {
 public:
  explicit RingBytes(const char* value) { ::setenv("TESSERA_SHM_RING_BYTES", value, 1); }
  ~RingBytes() { ::unsetenv("TESSERA_SHM_RING_BYTES"); }
};

TEST(ShmPointToPoint, TagsMatchOutOfOrderAndMessagesStreamThroughSmallRings) {
  for (const char* ring : {"4096", "4194304"}) {
    RingBytes bytes(ring);
    testing::run_on_threads(
        2, dist::make_shm_communicator,
        [](ProcessGroup& group) {
          const int64_t sizes[] = {0, 1, 1000, 300001, 7};
          if (group.rank() == 0) {
            std::vector<dist::WorkPtr> sends;
            for (int t = 0; t < 5; ++t) sends.push_back(group.send(message(0, t, sizes[t]), 1, t));
            for (auto& s : sends) s->wait();
          } else {
            // Receive in reverse: every earlier message waits aside (drained from the ring) until its recv comes.
            for (int t = 4; t >= 0; --t) {
              Tensor in = zeros({sizes[t]});
              group.recv(in, 0, t)->wait();
              expect_message(in, 0, t);
            }
          }
        },
        long_timeout());
  }
}

TEST(ShmPointToPoint, SameTagMessagesArriveInOrderAndBothWaysAtOnceNeverDeadlock) {
  RingBytes bytes("8192");
  testing::run_on_threads(
      3, dist::make_shm_communicator,
      [](ProcessGroup& group) {
        const int me = group.rank();
        // Every rank sends 3 messages of 1 MiB with one tag to each other rank before receiving any:
        // a blocking send would deadlock here, with rings of 8 KiB.
        std::vector<dist::WorkPtr> sends;
        for (int peer = 0; peer < 3; ++peer)
          if (peer != me)
            for (int k = 0; k < 3; ++k) sends.push_back(group.send(message(me, k, 262144), peer, 9));
        for (int peer = 0; peer < 3; ++peer)
          if (peer != me)
            for (int k = 0; k < 3; ++k) {
              Tensor in = zeros({262144});
              group.recv(in, peer, 9)->wait();
              expect_message(in, peer, k);  // k-th of that tag, in the order sent
            }
        for (auto& s : sends) s->wait();
      },
      long_timeout());
}

TEST(ShmPointToPoint, ASendPostedBeforeACollectiveCompletesWhileItWaits) {
  // Rank 0 posts a message far larger than its ring, then enters an allreduce; rank 1 receives it
  // first and joins the allreduce after. Only the collective's waiting moves the rest of it.
  RingBytes bytes("4096");
  testing::run_on_threads(
      2, dist::make_shm_communicator,
      [](ProcessGroup& group) {
        Tensor sum = ones({10});
        if (group.rank() == 0) {
          dist::WorkPtr s = group.send(message(0, 1, 100000), 1, 1);
          group.allreduce(sum)->wait();
          s->wait();
        } else {
          Tensor in = zeros({100000});
          group.recv(in, 0, 1)->wait();
          expect_message(in, 0, 1);
          group.allreduce(sum)->wait();
        }
        EXPECT_EQ(sum.to_vector<float>()[0], 2.0f);
      },
      long_timeout());
}

TEST(ShmPointToPoint, AMessageOfAnotherSizeIsAValueErrorNamingBoth) {
  testing::run_on_threads(
      2, dist::make_shm_communicator,
      [](ProcessGroup& group) {
        if (group.rank() == 0) {
          group.send(message(0, 3, 10), 1, 3)->wait();
        } else {
          Tensor in = zeros({12});
          testing::expect_error<ValueError>([&] { group.recv(in, 0, 3)->wait(); },
                                            {"rank 1 from rank 0 (tag 3)", "40 bytes", "48"});
        }
      },
      long_timeout());
}

TEST(ShmPointToPoint, ARecvNobodySendsTimesOutNamingThePeerAndTag) {
  dist::ProcessGroupOptions short_timeout;
  short_timeout.timeout = 300ms;
  testing::run_on_threads(
      2, dist::make_shm_communicator,
      [](ProcessGroup& group) {
        if (group.rank() == 1) {
          Tensor in = zeros({4});
          const auto start = std::chrono::steady_clock::now();
          testing::expect_error<TimeoutError>([&] { group.recv(in, 0, 42)->wait(); },
                                              {"[shm recv] rank 1 from rank 0 (tag 42)", "timed out"});
          EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
        }
      },
      short_timeout);
}

// Rank r of `size` ranks that are threads of this process, over `store`, with a 10 s setup timeout.
dist::BackendContext thread_rank(std::shared_ptr<dist::Store> store, int r, int size) {
  dist::BackendContext c;
  c.store = std::move(store);
  c.rank = r;
  c.size = size;
  c.local_size = size;
  c.timeout = 10s;
  return c;
}

TEST(ShmFailure, ARankThatNeverArrivesIsNamedWithinTheTimeout) {
  // Ranks 0 and 1 allreduce with a 300 ms deadline; rank 2 joins the group but never calls.
  auto store = std::make_shared<dist::HashStore>(10s);
  std::vector<std::string> errors(3);
  std::vector<std::chrono::milliseconds> took(3);
  std::vector<std::thread> threads;
  std::atomic<int> finished{0};
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto comm = dist::make_shm_communicator(thread_rank(store, r, 3));
      if (r == 2) {
        // Stay alive (a live, slow peer) until the others have given up; bounded by their
        // 300 ms deadline, not a sleep.
        while (finished.load() < 2) std::this_thread::yield();
        return;
      }
      std::vector<float> data(1000, 1.0f);
      auto start = std::chrono::steady_clock::now();
      try {
        comm->allreduce(dist::Buffer{data.data(), 1000, DType::Float32}, ReduceOp::Sum, start + 300ms);
      } catch (const TimeoutError& e) {
        errors[r] = e.what();
      }
      took[r] = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      finished.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("[shm allreduce] rank " + std::to_string(r) + " of 3"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank(s) 2 "), std::string::npos) << errors[r];
    EXPECT_GE(took[r], 300ms);
    EXPECT_LT(took[r], 5000ms);  // generous: the machine is shared
  }
}

TEST(ShmFailure, ARankThatLeavesTheGroupEndsItsPeersWaitsAtOnce) {
  // Ranks 0 and 1 allreduce with a 10 s deadline; rank 2 leaves the group (a live job's survivor
  // regrouping, dist/live_membership.h) instead of calling. Its peers stop waiting for it within a
  // sleep slice, with a PeerFailureError naming it, long before the deadline.
  auto store = std::make_shared<dist::HashStore>(10s);
  std::vector<std::string> errors(3);
  std::vector<std::chrono::milliseconds> took(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto comm = dist::make_shm_communicator(thread_rank(store, r, 3));
      if (r == 2) {
        comm->leave();
        return;
      }
      std::vector<float> data(1000, 1.0f);
      auto start = std::chrono::steady_clock::now();
      try {
        comm->allreduce(dist::Buffer{data.data(), 1000, DType::Float32}, ReduceOp::Sum, start + 10s);
      } catch (const PeerFailureError& e) {
        errors[r] = e.what();
      }
      took[r] = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("peer rank 2 left the group"), std::string::npos) << errors[r];
    EXPECT_LT(took[r], 5000ms);  // the deadline is 10 s; generous: the machine is shared
  }
}

TEST(ShmFailure, AProcessThatExitsIsAPeerFailureWellBeforeTheTimeout) {
  // A forked child joins as rank 1 and exits without calling the collective; rank 0 must report it
  // (the child is a zombie until reaped below, which the liveness check must see through). The
  // child is forked before the store server starts its thread (a child forked from a process with
  // other threads can inherit a lock one of them held, and wait on it forever) and learns the
  // server's port through a pipe.
  const std::string token = "shm-test-token";
  auto options = [&](uint16_t port, int rank) {
    dist::TcpStoreOptions o;
    o.port = port;
    o.token = token;
    o.rank = rank;
    o.timeout = 10s;
    o.connect_timeout = 10s;
    return o;
  };
  int port_pipe[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  pid_t child = ::fork();
  if (child == 0) {
    int code = 0;
    try {
      ::close(port_pipe[1]);
      pollfd p{port_pipe[0], POLLIN, 0};
      uint16_t port = 0;
      if (::poll(&p, 1, 30000) != 1 || ::read(port_pipe[0], &port, sizeof port) != sizeof port) ::_exit(2);
      dist::BackendContext c;
      c.store = std::make_shared<dist::TcpStore>(options(port, 1));
      c.rank = 1;
      c.size = 2;
      c.local_size = 2;
      c.timeout = 10s;
      auto comm = dist::make_shm_communicator(c);
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  ASSERT_GT(child, 0);
  ::close(port_pipe[0]);
  dist::TcpStoreServerOptions so;
  so.token = token;
  so.log = [](const std::string&) {};
  dist::TcpStoreServer server(so);
  const uint16_t port = server.port();
  ASSERT_EQ(::write(port_pipe[1], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  ::close(port_pipe[1]);
  dist::BackendContext c;
  c.store = std::make_shared<dist::TcpStore>(options(port, 0));
  c.rank = 0;
  c.size = 2;
  c.local_size = 2;
  c.timeout = 10s;
  auto comm = dist::make_shm_communicator(c);
  std::vector<float> data(100, 1.0f);
  auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    comm->allreduce(dist::Buffer{data.data(), 100, DType::Float32}, ReduceOp::Sum, start + 20s);
  } catch (const PeerFailureError& e) {
    error = e.what();
  }
  auto took = std::chrono::steady_clock::now() - start;
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(error.find("peer rank 1 (pid " + std::to_string(child) + ") has exited"), std::string::npos) << error;
  EXPECT_LT(took, 10s);
  // A receive from the dead peer fails the same way, naming the tag, well before its deadline.
  start = std::chrono::steady_clock::now();
  error.clear();
  try {
    comm->post_recv(dist::Buffer{data.data(), 100, DType::Float32}, 1, 5)->wait(start + 20s);
  } catch (const PeerFailureError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("[shm recv] rank 0 from rank 1 (tag 5): peer rank 1 (pid " + std::to_string(child) +
                       ") has exited"),
            std::string::npos)
      << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

}  // namespace
}  // namespace tessera
