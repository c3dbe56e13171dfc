// ProcessGroup over the threaded backend (tier 1): every collective at world sizes 1–8, argument
// checks, sequence numbers, subgroups, and the failure behaviour (a rank that never arrives is
// named; the group is broken afterwards; debug mode reports a mismatch rank by rank).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <map>
#include <sstream>
#include <thread>

#include "dist/collective_suite.h"
#include "tessera/dist/backends/threaded/threaded_communicator.h"
#include "tessera/ops/ops.h"
#include "tessera/util/thread_priority.h"

namespace tessera {
namespace {

// Failure reports name the host each missing rank runs on.
std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}


using dist::ProcessGroup;

testing::CommunicatorFactory threaded(int world) {
  auto shared = dist::make_threaded_world(world);
  return [shared](const dist::BackendContext& c) { return dist::make_threaded_communicator(shared, c.rank); };
}

dist::ProcessGroupOptions short_timeout(int ms) {
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::milliseconds(ms);
  return o;
}

class ThreadedCollectives : public ::testing::TestWithParam<int> {};

TEST_P(ThreadedCollectives, EveryOperationMatchesTheSerialReference) {
  int world = GetParam();
  // No chunking to exercise here, so no multi-MiB size (the real backends test those).
  auto failures = testing::run_suite_on_threads(world, threaded(world), {{0, 1, 7, 1027, 65537}, true});
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures.front();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ThreadedCollectives, ::testing::Values(1, 2, 3, 4, 5, 7, 8));

TEST(ProcessGroup, ChecksArgumentsOnTheCallersThread) {
  testing::run_on_threads(2, threaded(2), [](ProcessGroup& g) {
    Tensor m = ones({3, 4});
    EXPECT_THROW(g.allreduce(m.transpose(0, 1)), ValueError);  // not contiguous
    EXPECT_THROW(g.broadcast(ones({4}), 2), ValueError);       // root out of range
    EXPECT_THROW(g.allgather(ones({4}), ones({7})), ValueError);
    EXPECT_THROW(g.reduce_scatter(ones({5}), ones({2})), ValueError);
    EXPECT_THROW(g.alltoall(ones({5}), ones({5})), ValueError);  // 5 does not split into 2 blocks
    EXPECT_THROW(g.send(ones({4}), g.rank()), ValueError);        // to itself
    EXPECT_THROW(g.new_group({0, 0}), ValueError);
    try {
      g.allgather(ones({4}), ones({4}), {4, 1, 2});
      ADD_FAILURE() << "expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("[allgather] 3 counts for a group of 2"), std::string::npos) << e.what();
    }
    EXPECT_EQ(g.sequence_number(), 0u);  // nothing was queued
  });
}

TEST(ProcessGroup, NumbersCollectivesInOrderAndDescribesThem) {
  testing::run_on_threads(3, threaded(3), [](ProcessGroup& g) {
    auto a = g.allreduce(ones({10}));
    auto b = g.broadcast(ones({5}), 1);
    EXPECT_EQ(a->description(), "allreduce #0 (sum, float32 x 10)");
    EXPECT_EQ(b->description(), "broadcast #1 (root 1, float32 x 5)");
    b->wait();
    a->wait();
    EXPECT_TRUE(a->is_completed());
    EXPECT_EQ(g.sequence_number(), 2u);
  });
}

// Each distinct call's text is built once and shared (call_text.h): a repeated call, and calls from
// one line that differ only in size, dtype, reduce op, root or counts, must still each be described
// as what they are, here and in the flight record the collective check compares.
TEST(ProcessGroup, DescribesEveryCallAsItIsWhenTheirTextsAreShared) {
  testing::run_on_threads(2, threaded(2), [](ProcessGroup& g) {
    std::vector<std::string> got;
    for (int64_t n : {4, 4, 6, 4}) {
      auto w = g.allreduce(ones({n}), n == 6 ? dist::ReduceOp::Max : dist::ReduceOp::Sum);  // one call site
      got.push_back(w->description());
      w->wait();
    }
    EXPECT_EQ(got, (std::vector<std::string>{"allreduce #0 (sum, float32 x 4)", "allreduce #1 (sum, float32 x 4)",
                                             "allreduce #2 (max, float32 x 6)", "allreduce #3 (sum, float32 x 4)"}));
    for (int root : {0, 1}) {
      auto w = g.broadcast(ones({3}), root);
      EXPECT_EQ(w->description(), "broadcast #" + std::to_string(4 + root) + " (root " + std::to_string(root) +
                                      ", float32 x 3)");
      w->wait();
    }
    // The counts move into the queued operation; its text is still theirs.
    for (std::vector<int64_t> counts : {std::vector<int64_t>{1, 2}, std::vector<int64_t>{2, 1}}) {
      const std::string want = "allgather #" + std::to_string(counts[0] == 1 ? 6 : 7) + " (float32, counts [" +
                               std::to_string(counts[0]) + "," + std::to_string(counts[1]) + "])";
      auto w = g.allgather(ones({counts[static_cast<size_t>(g.rank())]}), ones({3}), counts);
      EXPECT_EQ(w->description(), want);
      w->wait();
    }
    auto rs = g.reduce_scatter(ones({3}), ones({g.rank() == 0 ? 1 : 2}), std::vector<int64_t>{1, 2}, dist::ReduceOp::Avg);
    EXPECT_EQ(rs->description(), "reduce_scatter #8 (avg, float32, counts [1,2])");
    rs->wait();
    auto record = g.flight_record("test")["entries"];
    ASSERT_EQ(record.size(), 9u);
    EXPECT_EQ(record[2]["description"], "allreduce #2 (max, float32 x 6)");
    EXPECT_EQ(record[7]["description"], "allgather #7 (float32, counts [2,1])");
    EXPECT_EQ(record[8]["op"], "reduce_scatter");
    EXPECT_EQ(record[8]["state"], "done");
    EXPECT_NE(record[0]["call_site"].get<std::string>().find("process_group_test.cpp:"), std::string::npos);
  });
}

TEST(ProcessGroup, SubgroupsRunIndependently) {
  testing::run_on_threads(4, threaded(4), [](ProcessGroup& g) {
    auto low = g.new_group({0, 1});
    auto high = g.new_group({3, 2});
    if (g.rank() < 2) {
      ASSERT_NE(low, nullptr);
      EXPECT_EQ(high, nullptr);
      EXPECT_EQ(low->rank(), g.rank());
    } else {
      EXPECT_EQ(low, nullptr);
      ASSERT_NE(high, nullptr);
      EXPECT_EQ(high->rank(), g.rank() - 2);
      EXPECT_EQ(high->global_ranks(), (std::vector<int>{2, 3}));
    }
    auto& mine = g.rank() < 2 ? low : high;
    Tensor t = full({3}, static_cast<float>(g.rank()));
    mine->allreduce(t)->wait();
    float want = g.rank() < 2 ? 0.0f + 1.0f : 2.0f + 3.0f;
    EXPECT_EQ(t.data<float>()[2], want);
    auto failures = testing::run_collective_suite(*mine, {{0, 5, 1000}, true});
    EXPECT_TRUE(failures.empty()) << failures.front();
    g.barrier()->wait();  // the parent still works
  });
}

TEST(ProcessGroup, ARankThatNeverArrivesIsNamedAndTheGroupIsBroken) {
  const int world = 4, victim = 2;
  std::latch others_failed(world - 1);
  testing::run_on_threads(
      world, threaded(world),
      [&](ProcessGroup& g) {
        g.allreduce(ones({8}))->wait();  // #0
        if (g.rank() == victim) {
          others_failed.wait();  // never calls #1, stays alive until the others have failed
          return;
        }
        try {
          g.allreduce(ones({8}))->wait();  // #1
          ADD_FAILURE() << "expected a timeout";
        } catch (const TimeoutError& e) {
          std::string m = e.what();
          EXPECT_NE(m.find("[allreduce #1 (sum, float32 x 8)] rank " + std::to_string(g.rank()) + " of 4"),
                    std::string::npos)
              << m;
          EXPECT_NE(m.find("never arrived at #1: rank 2 on " + host_name() + " [no report"), std::string::npos) << m;
        }
        others_failed.count_down();
        // Broken: the next op fails at once, naming the op that broke it.
        try {
          g.barrier()->wait();
          ADD_FAILURE() << "expected the group to be broken";
        } catch (const TimeoutError& e) {
          EXPECT_NE(std::string(e.what()).find("failed earlier in allreduce #1"), std::string::npos) << e.what();
        }
      },
      short_timeout(300));
}

TEST(ProcessGroup, DebugModeReportsAMismatchOnEveryRank) {
  dist::ProcessGroupOptions options = short_timeout(5000);
  options.debug = true;
  std::atomic<int> reported{0};
  testing::run_on_threads(
      3, threaded(3),
      [&](ProcessGroup& g) {
        g.allreduce(ones({4}))->wait();
        try {
          if (g.rank() == 1) {
            g.broadcast(ones({4}), 0)->wait();
          } else {
            g.allreduce(ones({4}))->wait();
          }
          ADD_FAILURE() << "expected a mismatch report";
        } catch (const ValueError& e) {
          std::string m = e.what();
          EXPECT_NE(m.find("collective #1 differs across ranks"), std::string::npos) << m;
          EXPECT_NE(m.find("rank 0: allreduce (sum, float32 x 4)"), std::string::npos) << m;
          EXPECT_NE(m.find("rank 1: broadcast (root 0, float32 x 4)"), std::string::npos) << m;
          ++reported;
        }
      },
      options);
  EXPECT_EQ(reported.load(), 3);
}

TEST(ProcessGroup, WorkWaitWithAShortTimeoutNamesTheOperation) {
  std::latch done(1);
  testing::run_on_threads(
      2, threaded(2),
      [&](ProcessGroup& g) {
        if (g.rank() == 1) {
          done.wait();  // joins the allreduce only after rank 0 has given up waiting once
        }
        auto work = g.allreduce(ones({4}));
        if (g.rank() == 0) {
          try {
            work->wait(std::chrono::milliseconds(20));
            ADD_FAILURE() << "expected a timeout";
          } catch (const TimeoutError& e) {
            EXPECT_NE(std::string(e.what()).find("[allreduce #0"), std::string::npos) << e.what();
          }
          done.count_down();
        }
        work->wait();  // still completes
      },
      short_timeout(20000));
}

TEST(ProcessGroup, SendAndRecvAcrossThreads) {
  testing::run_on_threads(2, threaded(2), [](ProcessGroup& g) {
    Tensor t = g.rank() == 0 ? full({6}, 3.5f) : zeros({6});
    if (g.rank() == 0) {
      g.send(t, 1, 7)->wait();
    } else {
      g.recv(t, 0, 7)->wait();
      EXPECT_EQ(t.data<float>()[5], 3.5f);
    }
  });
}

// This process's threads named `name`: thread id -> nice value (/proc/self/task/*/stat's 19th field).
std::map<std::string, int> nice_of_threads_named(const std::string& name) {
  std::map<std::string, int> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string thread_name;
    std::getline(comm, thread_name);
    if (thread_name != name) continue;
    std::ifstream stat_file(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
    std::istringstream after_name(stat.substr(stat.rfind(')') + 2));  // fields 3 (the state) onwards
    const std::vector<std::string> fields{std::istream_iterator<std::string>(after_name),
                                          std::istream_iterator<std::string>()};
    out[task.path().filename().string()] = std::stoi(fields.at(19 - 3));
  }
  return out;
}

// The nice values of the collectives threads a one-rank group starts (any other group's threads
// in this process left out).
std::vector<int> collectives_thread_nices() {
  const auto before = nice_of_threads_named("tessera-comm");
  std::vector<int> nices;
  testing::run_on_threads(1, threaded(1), [&](ProcessGroup& g) {
    Tensor t = ones({4});
    g.allreduce(t)->wait();
    for (const auto& [thread, nice] : nice_of_threads_named("tessera-comm"))
      if (!before.count(thread)) nices.push_back(nice);
  });
  return nices;
}

TEST(ProcessGroup, TheCollectivesThreadRunsAboveTheProcessWhereItMay) {
  // Whether this process may raise a thread's priority (root, CAP_SYS_NICE, RLIMIT_NICE), asked of
  // a thread of its own.
  bool may_raise = false;
  std::thread([&] { may_raise = raise_this_thread_priority(1); }).join();
  const int base = this_thread_nice();
  EXPECT_EQ(collectives_thread_nices(), std::vector<int>{may_raise ? std::max(-20, base - 10) : base})
      << "the default, 10 levels above";
  ::setenv("TESSERA_COMM_PRIORITY", "3", 1);
  EXPECT_EQ(collectives_thread_nices(), std::vector<int>{may_raise ? std::max(-20, base - 3) : base});
  ::setenv("TESSERA_COMM_PRIORITY", "0", 1);
  EXPECT_EQ(collectives_thread_nices(), std::vector<int>{base}) << "0: the process's own priority";
  ::setenv("TESSERA_COMM_PRIORITY", "high", 1);
  try {
    collectives_thread_nices();
    ADD_FAILURE() << "a priority that is not a number must be refused";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[TESSERA_COMM_PRIORITY] expected an integer from 0 to 39, got 'high'"), std::string::npos) << e.what();
  }
  ::unsetenv("TESSERA_COMM_PRIORITY");
  EXPECT_EQ(this_thread_nice(), base) << "the calling thread keeps its priority";
}

}  // namespace
}  // namespace tessera
