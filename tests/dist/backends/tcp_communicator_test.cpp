// The tcp backend over threads (tier 2): one rank per thread, real TCP connections on loopback.
// Every collective against the serial reference (both all-reduce algorithms: recursive doubling for
// small buffers on power-of-two groups, the ring otherwise), subgroups, the same bits on every rank
// for inputs that are not exact, and the failures: sizes that differ between ranks, a peer that
// goes away, a peer that never comes, and a stranger at the rendezvous port.
#include <gtest/gtest.h>

#include <cstring>
#include <latch>
#include <random>
#include <thread>

#include "dist/collective_suite.h"
#include "tessera/dist/backends/tcp/tcp_communicator.h"
#include "tessera/dist/backends/tcp/tcp_mesh.h"
#include "tessera/dist/net/socket.h"
#include "tessera/dist/store/hash_store.h"

namespace tessera {
namespace {

using dist::Buffer;
using dist::Communicator;
using dist::Milliseconds;
using dist::ReduceOp;

std::string joined(const std::vector<std::string>& failures) {
  std::string s;
  for (const auto& f : failures) s += f + "\n";
  return s;
}

dist::ProcessGroupOptions short_timeout() {
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);  // a failing test fails instead of hanging
  return o;
}

class TcpCollectives : public ::testing::TestWithParam<int> {};

TEST_P(TcpCollectives, EveryCollectiveMatchesTheSerialReference) {
  testing::SuiteOptions suite;
  suite.sizes = {0, 1, 7, 1027, 16385, 786433};  // 16385 floats: above kTcpSmallBytes, the ring
  auto failures = testing::run_suite_on_threads(GetParam(), dist::make_tcp_communicator, suite, short_timeout());
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, TcpCollectives, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return "world_" + std::to_string(info.param); });

TEST(TcpSubgroups, SplitGroupsRunTheSuiteOnTheirOwnConnections) {
  std::mutex mu;
  std::vector<std::string> failures;
  testing::run_on_threads(
      4, dist::make_tcp_communicator,
      [&](dist::ProcessGroup& group) {
        auto odd = group.new_group({3, 1});
        testing::SuiteOptions small;
        small.sizes = {0, 5, 1025, 40000};
        std::vector<std::string> mine;
        if (odd) {
          EXPECT_EQ(odd->rank(), group.rank() == 1 ? 0 : 1);
          mine = testing::run_collective_suite(*odd, small);
        }
        auto f = testing::run_collective_suite(group, small);  // the parent still works
        mine.insert(mine.end(), f.begin(), f.end());
        std::lock_guard lock(mu);
        failures.insert(failures.end(), mine.begin(), mine.end());
      },
      short_timeout());
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

// Communicators of a `world` on threads; body(rank, communicator) on each; the first exception of
// each rank is kept. Unless `keep_until_all_done` is false, every communicator lives until each rank's
// body has returned: a rank that finished early would otherwise close its connections under a peer
// still setting up its own (a peer that goes away, which one test wants and the others do not).
std::vector<std::string> on_threads(int world, const std::function<void(int, Communicator&)>& body,
                                    Milliseconds timeout = Milliseconds(30000), bool keep_until_all_done = true) {
  auto store = std::make_shared<dist::HashStore>(timeout);
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::latch done(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm;
      try {
        dist::BackendContext context;
        context.store = store, context.rank = r, context.size = world, context.local_size = world, context.timeout = timeout;
        comm = dist::make_tcp_communicator(context);
        body(r, *comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
      if (!keep_until_all_done) comm.reset();
      done.arrive_and_wait();
    });
  for (auto& t : threads) t.join();
  return errors;
}

dist::Deadline in(Milliseconds ms) { return dist::detail::Clock::now() + ms; }

TEST(TcpAllreduce, EveryRankGetsTheSameBitsFromInputsThatAreNotExact) {
  // Recursive doubling where p is a power of two, then halving-doubling (at p = 4, up to
  // kTcpHalvingMaxBytes), then the ring.
  for (int world : {2, 3, 4})
    for (int64_t n : {int64_t(1000), int64_t(100003), int64_t(1000003)}) {
      std::vector<std::vector<float>> results(static_cast<size_t>(world));
      auto errors = on_threads(world, [&](int r, Communicator& comm) {
        std::mt19937 gen(static_cast<unsigned>(17 + r));
        std::normal_distribution<float> normal(0.f, 1.f);
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = normal(gen) * 1e3f;
        comm.allreduce(Buffer{v.data(), n, DType::Float32}, ReduceOp::Sum, in(Milliseconds(30000)));
        results[static_cast<size_t>(r)] = std::move(v);
      });
      for (const auto& e : errors) ASSERT_EQ(e, "");
      for (int r = 1; r < world; ++r)
        EXPECT_EQ(std::memcmp(results[0].data(), results[static_cast<size_t>(r)].data(), results[0].size() * sizeof(float)), 0)
            << "world " << world << ", " << n << " elements: rank " << r << " differs from rank 0";
    }
}

TEST(TcpAllreduce, SizesThatDifferBetweenRanksAreNamedNotReducedWrongly) {
  auto errors = on_threads(2, [](int r, Communicator& comm) {
    std::vector<float> v(r == 0 ? 10 : 20, 1.f);
    comm.allreduce(Buffer{v.data(), static_cast<int64_t>(v.size()), DType::Float32}, ReduceOp::Sum, in(Milliseconds(5000)));
  });
  EXPECT_NE(errors[0].find("[tcp allreduce] rank 0: rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("sent 80 bytes for allreduce where this rank expected 40 bytes"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("different sizes"), std::string::npos) << errors[1];
}

TEST(TcpAllreduce, DifferentCollectivesAreNamed) {
  auto errors = on_threads(2, [](int r, Communicator& comm) {
    std::vector<float> v(8, 1.f);
    if (r == 0) comm.allreduce(Buffer{v.data(), 8, DType::Float32}, ReduceOp::Sum, in(Milliseconds(5000)));
    else comm.broadcast(Buffer{v.data(), 8, DType::Float32}, 1, in(Milliseconds(5000)));
  });
  EXPECT_NE(errors[0].find("for broadcast where this rank expected 32 bytes for allreduce"), std::string::npos) << errors[0];
}

TEST(TcpAllreduce, APeerThatGoesAwayIsNamedAtOnce) {
  auto errors = on_threads(2, [&](int r, Communicator& comm) {
    std::vector<float> v(1 << 20, 1.f);
    if (r == 1) {
      comm.barrier(in(Milliseconds(20000)));
      return;  // its communicator (and connections) go with the thread's scope
    }
    comm.barrier(in(Milliseconds(20000)));
    comm.allreduce(Buffer{v.data(), static_cast<int64_t>(v.size()), DType::Float32}, ReduceOp::Sum, in(Milliseconds(20000)));
  }, Milliseconds(30000), /*keep_until_all_done=*/false);
  EXPECT_NE(errors[0].find("[tcp allreduce] rank 0: rank 1 (127.0.0.1:"), std::string::npos) << errors[0];
  const bool said = errors[0].find("closed its connection") != std::string::npos || errors[0].find("reset its connection") != std::string::npos;
  EXPECT_TRUE(said) << errors[0];
}

// A live job's survivor leaves a failed group while keeping it (dist/live_membership.h): its peers
// read the end of its connections at once, not at their deadline.
TEST(TcpAllreduce, APeerThatLeavesTheGroupIsNamedAtOnceThoughItsCommunicatorLives) {
  auto errors = on_threads(3, [&](int r, Communicator& comm) {
    std::vector<float> v(1 << 16, 1.f);
    comm.barrier(in(Milliseconds(20000)));
    if (r == 2) {
      comm.leave();
      return;  // the communicator lives on until every rank's body has returned
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.allreduce(Buffer{v.data(), static_cast<int64_t>(v.size()), DType::Float32}, ReduceOp::Sum, in(Milliseconds(20000)));
    } catch (...) {
      // As a survivor does: it leaves too, so that a peer waiting for it (not for rank 2) stops.
      comm.leave();
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
      throw;
    }
  });
  for (int r = 0; r < 2; ++r) {
    const bool said = errors[r].find("closed its connection") != std::string::npos ||
                      errors[r].find("reset its connection") != std::string::npos;
    EXPECT_TRUE(said) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(errors[r].find("timed out"), std::string::npos) << errors[r];
  }
}

TEST(TcpAllreduce, APeerThatNeverComesTimesOutNamingIt) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  auto errors = on_threads(2, [&](int r, Communicator& comm) {
    if (r == 1) {  // stays connected but never joins the all-reduce, until rank 0 has given up
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return done; });
      return;
    }
    std::vector<float> v(16, 1.f);
    try {
      comm.allreduce(Buffer{v.data(), 16, DType::Float32}, ReduceOp::Sum, in(Milliseconds(300)));
    } catch (...) {
      std::lock_guard lock(mu);
      done = true;
      cv.notify_all();
      throw;
    }
  });
  EXPECT_NE(errors[0].find("[tcp allreduce] rank 0: timed out waiting for its peers (receiving from rank 1"), std::string::npos)
      << errors[0];
}

TEST(TcpAllreduce, AbortGetsAWaitingRankOutAndFailsEveryLaterCollective) {
  // The process group's collective check calls abort() from another thread when the ranks disagree;
  // a rank waiting for a peer that never joins must leave at once, not at its (here 60 s) deadline.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  auto errors = on_threads(2, [&](int r, Communicator& comm) {
    if (r == 1) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return done; });
      return;
    }
    std::thread aborter([&] {
      std::unique_lock lock(mu);
      // Most likely rank 0 is waiting in the all-reduce by then; if not, the all-reduce fails as it
      // starts, which is as right.
      cv.wait_for(lock, Milliseconds(50), [&] { return done; });
      comm.abort();
    });
    std::vector<float> v(16, 1.f);
    const auto start = dist::detail::Clock::now();
    std::string first, later;
    try {
      comm.allreduce(Buffer{v.data(), 16, DType::Float32}, ReduceOp::Sum, in(Milliseconds(60000)));
    } catch (const std::exception& e) {
      first = e.what();
    }
    const auto took = dist::detail::Clock::now() - start;
    aborter.join();
    try {
      comm.barrier(in(Milliseconds(60000)));
    } catch (const std::exception& e) {
      later = e.what();
    }
    {
      std::lock_guard lock(mu);
      done = true;
    }
    cv.notify_all();
    EXPECT_TRUE(comm.abortable());
    const bool named = first.find("[tcp allreduce] rank 0: aborted while waiting for rank 1") != std::string::npos ||
                       first.find("[tcp allreduce] rank 0: the process group failed earlier") != std::string::npos;
    EXPECT_TRUE(named) << first;
    EXPECT_LT(took, Milliseconds(10000)) << "abort took as long as a timeout";
    EXPECT_NE(later.find("[tcp barrier] rank 0: the process group failed earlier"), std::string::npos) << later;
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(TcpMesh, AStrangerAtTheRendezvousPortIsIgnored) {
  dist::HashStore store(Milliseconds(20000));
  std::vector<dist::detail::TcpMesh> meshes(2);
  std::string error;
  std::thread zero([&] {
    try {
      meshes[0] = dist::detail::connect_tcp_mesh(store, 0, 2, "127.0.0.1", Milliseconds(20000));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  // A stranger connects first and sends 16 bytes that are not a hello.
  store.wait({"tcp/addr/0"}, Milliseconds(20000));
  const std::string address = store.get_string("tcp/addr/0");
  const uint16_t port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  const auto deadline = dist::detail::Clock::now() + std::chrono::seconds(10);
  std::string why;
  dist::detail::Socket garbage = dist::detail::try_connect_tcp("127.0.0.1", port, deadline, &why);
  ASSERT_TRUE(garbage.valid()) << why;
  const uint8_t junk[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  dist::detail::send_all(garbage.fd(), junk, sizeof junk, deadline);
  std::thread one([&] { meshes[1] = dist::detail::connect_tcp_mesh(store, 1, 2, "127.0.0.1", Milliseconds(20000)); });
  uint8_t answer = 0;
  EXPECT_EQ(dist::detail::recv_exact(garbage.fd(), &answer, 1, deadline).status, dist::detail::IoStatus::kClosed);
  one.join();
  zero.join();
  ASSERT_EQ(error, "");
  EXPECT_TRUE(meshes[0].peers[1].valid());
  EXPECT_TRUE(meshes[1].peers[0].valid());
}

TEST(TcpBackend, IsChosenByName) {
  auto errors = on_threads(2, [](int, Communicator& comm) { EXPECT_STREQ(comm.backend_name(), "tcp"); });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_NE(std::find(dist::backend_names().begin(), dist::backend_names().end(), "tcp"), dist::backend_names().end());
}

}  // namespace
}  // namespace tessera
