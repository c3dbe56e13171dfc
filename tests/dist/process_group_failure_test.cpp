// How a group fails, on gloo over threads (tier 2; the same cases across real processes are in
// collectives_process_test.cpp): a rank that never arrives, a rank whose connections close, the
// group staying broken afterwards, debug mode's call check, and Work::wait(timeout). Every wait is
// bounded and no test sleeps to synchronise: ranks coordinate through a store.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include <filesystem>

#include "dist/collective_suite.h"
#include "testing/expect.h"
#include "testing/temp_dir.h"
#include "tessera/dist/backends/backend.h"
#include "tessera/dist/flight_report.h"
#include "tessera/dist/store/hash_store.h"

namespace tessera {
namespace {

using dist::Milliseconds;
using dist::ProcessGroup;
using Clock = std::chrono::steady_clock;

constexpr Milliseconds kCoordination{30000};  // bound on the test's own store waits

struct Outcome {
  std::string type;  // "TimeoutError", "PeerFailureError", "ValueError", "none"
  std::string message;
  Milliseconds elapsed{0};
};

// Waits on `work` and records how it ended.
Outcome outcome_of(const dist::WorkPtr& work) {
  auto start = Clock::now();
  Outcome o{"none", "", Milliseconds(0)};
  try {
    work->wait();
  } catch (const TimeoutError& e) {
    o = {"TimeoutError", e.what(), {}};
  } catch (const PeerFailureError& e) {
    o = {"PeerFailureError", e.what(), {}};
  } catch (const ValueError& e) {
    o = {"ValueError", e.what(), {}};
  } catch (const std::exception& e) {
    o = {"other", e.what(), {}};
  }
  o.elapsed = std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
  return o;
}

// One thread per rank, each with its own gloo communicator and group (held in a unique_ptr, so a
// rank can destroy its group to play a dead peer); `test_store` is shared by the ranks for the
// test's own coordination, apart from the groups' store.
void run_ranks(int world, dist::ProcessGroupOptions options,
               const std::function<void(int rank, std::unique_ptr<ProcessGroup>& group, dist::Store& test_store)>& body) {
  auto group_store = std::make_shared<dist::HashStore>(kCoordination);
  auto test_store = std::make_shared<dist::HashStore>(kCoordination);
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::BackendContext context;
        context.store = std::make_shared<dist::PrefixStore>("pg", group_store);
        context.rank = r;
        context.size = world;
        context.local_size = world;
        context.timeout = kCoordination;
        auto group = std::make_unique<ProcessGroup>(dist::make_gloo_communicator(context), context.store, options);
        body(r, group, *test_store);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void expect_broken_at_once(ProcessGroup& group, const std::string& broken_by) {
  Outcome later = outcome_of(group.barrier());
  EXPECT_NE(later.type, "none");
  EXPECT_TRUE(has(later.message, "failed earlier in " + broken_by)) << later.message;
  EXPECT_LT(later.elapsed, Milliseconds(500)) << later.message;
}

TEST(GlooFailure, ARankThatNeverArrivesTimesOutEveryOtherNamingIt) {
  dist::ProcessGroupOptions options;
  options.timeout = Milliseconds(1000);
  const int absent = 2;
  std::mutex mu;
  std::vector<Outcome> outcomes;
  run_ranks(4, options, [&](int rank, std::unique_ptr<ProcessGroup>& group, dist::Store& test_store) {
    Tensor t = ones({1000});
    group->allreduce(t)->wait();  // #0: everyone connected
    if (rank == absent) {
      // Never calls #1; keeps its connections open until every other rank has its error.
      test_store.wait({"reported/0", "reported/1", "reported/3"}, kCoordination);
      return;
    }
    Outcome o = outcome_of(group->allreduce(t));
    expect_broken_at_once(*group, "allreduce #1");
    test_store.set("reported/" + std::to_string(rank), "1");
    std::lock_guard lock(mu);
    outcomes.push_back(o);
  });
  ASSERT_EQ(outcomes.size(), 3u);
  for (const Outcome& o : outcomes) {
    EXPECT_EQ(o.type, "TimeoutError") << o.message;
    EXPECT_TRUE(has(o.message, "allreduce #1")) << o.message;
    EXPECT_TRUE(has(o.message, "never arrived at #1: rank 2")) << o.message;
    // The timeout, plus the wait for the other ranks' progress reports (3 x 250 ms) and slack
    // for a loaded machine.
    EXPECT_LT(o.elapsed, Milliseconds(1000 + 750 + 1500)) << o.message;
  }
}

TEST(GlooFailure, AStuckCollectiveWritesAFlightRecordNamingTheMissingRankLongBeforeTheTimeout) {
  const std::string dir = tessera::testing::fresh_dir("GlooFailure", "flight");
  dist::set_flight_recorder_dir(dir);
  dist::ProcessGroupOptions options;
  options.timeout = Milliseconds(8000);  // the watchdog looks every 1 s (a quarter, at most 1 s)
  std::string report;
  Milliseconds written_after{0};
  run_ranks(2, options, [&](int rank, std::unique_ptr<ProcessGroup>& group, dist::Store& test_store) {
    Tensor t = ones({1000});
    group->allreduce(t)->wait();  // #0: both
    if (rank == 0) {
      test_store.set("calling", "1");
      EXPECT_NO_THROW(group->allreduce(t)->wait());  // #1: stuck until rank 1 comes, after the record
      return;
    }
    test_store.wait({"calling"}, kCoordination);
    const auto start = Clock::now();
    // Rank 0's record, looked for every 10 ms for at most 6 s (well inside the 8 s timeout).
    std::vector<nlohmann::json> records;
    while (Clock::now() - start < std::chrono::seconds(6)) {
      try {
        records = dist::read_flight_records(dir);  // a whole record (the write goes through a temporary)
        break;
      } catch (const ValueError&) {
      }
      std::this_thread::sleep_for(Milliseconds(10));
    }
    written_after = std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
    report = records.empty() ? "" : dist::analyze_flight_records(records);
    group->allreduce(t)->wait();  // #1: releases rank 0
  });
  dist::set_flight_recorder_dir("");
  // Written while rank 0 still waited: before the 8 s timeout (it takes two 1 s watchdog looks).
  EXPECT_LT(written_after, Milliseconds(6000)) << report;
  EXPECT_TRUE(has(report, "allreduce #1 (sum, float32 x 1000):")) << report;
  EXPECT_TRUE(has(report, "rank 0 on ")) << report;
  EXPECT_TRUE(has(report, "waiting in it for")) << report;
  EXPECT_TRUE(has(report, "MISSING from it:\n    rank 1: no flight record")) << report;
}

TEST(FlightReport, ADesyncAndARankBehindAreNamed) {
  using nlohmann::json;
  auto record = [](int rank, std::vector<json> entries) {
    return json{{"format", "tessera flight record 1"}, {"group", "g3-0to2-x"}, {"rank", rank}, {"size", 3},
                {"global_ranks", {0, 1, 2}}, {"host", "h" + std::to_string(rank)}, {"dumped_us", 10'000'000},
                {"entries", entries}};
  };
  auto entry = [](uint64_t seq, const std::string& call, const std::string& state, int64_t started) {
    const std::string op = call.substr(0, call.find(' '));
    return json{{"sequence", seq}, {"op", op}, {"description", op + " #" + std::to_string(seq) + call.substr(op.size())},
                {"state", state}, {"queued_us", started}, {"started_us", started}, {"finished_us", 0}, {"error", ""}};
  };
  // Rank 2 called a broadcast where ranks 0 and 1 all-reduce #5; rank 1 is still at #4.
  std::vector<json> records{
      record(0, {entry(4, "allreduce (sum, float32 x 10)", "done", 1), entry(5, "allreduce (sum, float32 x 10)", "running", 2'500'000)}),
      record(1, {entry(4, "allreduce (sum, float32 x 10)", "running", 9'000'000)}),
      record(2, {entry(4, "allreduce (sum, float32 x 10)", "done", 1), entry(5, "broadcast (root 0, float32 x 10)", "running", 3'000'000)})};
  const std::string report = dist::analyze_flight_records(records);
  EXPECT_TRUE(has(report, "DESYNC at collective #5")) << report;
  EXPECT_TRUE(has(report, "allreduce (sum, float32 x 10): rank 0 on h0")) << report;
  EXPECT_TRUE(has(report, "broadcast (root 0, float32 x 10): rank 2 on h2")) << report;
  EXPECT_TRUE(has(report, "rank 0 on h0: waiting in it for 7.5 s")) << report;
  EXPECT_TRUE(has(report, "rank 1 on h1: never reached it; its last collective is allreduce #4 (sum, float32 x 10) (running)"))
      << report;
  // Every rank done: nothing stuck.
  const std::string fine = dist::analyze_flight_records({record(0, {entry(4, "barrier ()", "done", 1)})});
  EXPECT_TRUE(has(fine, "MISSING")) << fine;  // ranks 1 and 2 wrote nothing
  EXPECT_THROW(dist::read_flight_records("/nonexistent-flight-dir"), ValueError);
}

TEST(GlooFailure, ADeadPeerFailsTheOthersPromptly) {
  dist::ProcessGroupOptions options;
  options.timeout = Milliseconds(15000);  // long, to tell prompt detection from a timeout
  const int dead = 1;
  std::mutex mu;
  std::vector<Outcome> outcomes;
  run_ranks(3, options, [&](int rank, std::unique_ptr<ProcessGroup>& group, dist::Store& test_store) {
    Tensor t = ones({1000});
    group->allreduce(t)->wait();  // #0
    if (rank == dead) {
      group.reset();  // its communicator closes its sockets
      return;
    }
    Outcome o = outcome_of(group->allreduce(t));
    expect_broken_at_once(*group, "allreduce #1");
    std::lock_guard lock(mu);
    outcomes.push_back(o);
  });
  ASSERT_EQ(outcomes.size(), 2u);
  for (const Outcome& o : outcomes) {
    EXPECT_TRUE(o.type == "PeerFailureError" || o.type == "TimeoutError") << o.type << ": " << o.message;
    EXPECT_TRUE(has(o.message, "allreduce #1")) << o.message;
    EXPECT_TRUE(has(o.message, "rank 1 on ")) << o.message;
    EXPECT_LT(o.elapsed, Milliseconds(7500)) << o.message;
  }
}

TEST(GlooFailure, DebugModeListsEachRanksCallOnEveryRank) {
  dist::ProcessGroupOptions options;
  options.timeout = Milliseconds(2000);
  options.debug = true;
  for (bool broadcast_instead : {false, true}) {
    std::mutex mu;
    std::vector<Outcome> outcomes;
    run_ranks(3, options, [&](int rank, std::unique_ptr<ProcessGroup>& group, dist::Store&) {
      Tensor ok = ones({16});
      group->allreduce(ok)->wait();  // #0 matches
      Tensor t = ones({rank == 1 && !broadcast_instead ? 17 : 16});
      Outcome o = outcome_of(rank == 1 && broadcast_instead ? group->broadcast(t, 0) : group->allreduce(t));
      std::lock_guard lock(mu);
      outcomes.push_back(o);
    });
    ASSERT_EQ(outcomes.size(), 3u);
    for (const Outcome& o : outcomes) {
      EXPECT_EQ(o.type, "ValueError") << o.message;
      EXPECT_TRUE(has(o.message, "collective #1 differs")) << o.message;
      EXPECT_TRUE(has(o.message, "rank 0: allreduce (sum, float32 x 16)")) << o.message;
      EXPECT_TRUE(has(o.message, "rank 2: allreduce (sum, float32 x 16)")) << o.message;
      EXPECT_TRUE(has(o.message, broadcast_instead ? "rank 1: broadcast (root 0, float32 x 16)"
                                                   : "rank 1: allreduce (sum, float32 x 17)"))
          << o.message;
    }
  }
}

TEST(GlooFailure, AShortWorkWaitTimesOutNamingTheOpWhichStillCompletes) {
  dist::ProcessGroupOptions options;
  options.timeout = Milliseconds(20000);
  run_ranks(2, options, [&](int rank, std::unique_ptr<ProcessGroup>& group, dist::Store& test_store) {
    Tensor t = ones({100});
    if (rank == 0) {
      dist::WorkPtr work = group->allreduce(t);
      testing::expect_error<TimeoutError>([&] { work->wait(Milliseconds(50)); },
                                          {"allreduce #0", "Work::wait timed out"});
      test_store.set("waited", "1");  // only now does rank 1 join the allreduce
      work->wait();
    } else {
      test_store.wait({"waited"}, kCoordination);
      group->allreduce(t)->wait();
    }
    EXPECT_EQ(t.to_vector<float>()[99], 2.0f);
  });
}

TEST(GlooFailure, ATimedOutRecvLeavesTheCollectivesWorking) {
  // Gloo cancels a timed-out transfer by closing every connection of its context; send/recv have
  // their own, so the group's collectives carry on.
  dist::ProcessGroupOptions options;
  options.timeout = Milliseconds(20000);
  run_ranks(2, options, [&](int rank, std::unique_ptr<ProcessGroup>& group, dist::Store&) {
    if (rank == 0) {
      Tensor in = zeros({10});
      dist::WorkPtr recv = group->recv(in, 1, 5);  // rank 1 never sends
      testing::expect_error<TimeoutError>([&] { recv->wait(Milliseconds(50)); }, {"rank 0 from rank 1 (tag 5)", "Timed out"});
    }
    Tensor t = ones({100});
    group->allreduce(t)->wait();
    EXPECT_EQ(t.to_vector<float>()[0], 2.0f);
  });
}

}  // namespace
}  // namespace tessera
