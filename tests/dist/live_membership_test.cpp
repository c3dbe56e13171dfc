// The live-membership protocol (dist/live_membership.h) over an in-process store, members as
// threads: who is in a round, in what order, whose state wins, when a round closes, and what a late
// member and a joiner do. The trainer's use of it runs in real processes in
// tests/elastic/live_run_test.cpp.
#include "tessera/dist/live_membership.h"

#include <gtest/gtest.h>

#include <thread>

#include "tessera/dist/store/hash_store.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

namespace tessera::dist {
namespace {

using namespace std::chrono_literals;

// Every member a test starts arrives within the settle time, however loaded the machine (threads
// started together; 2 s of slack). A test that wants a member late calls it after the round.
LiveOptions quick(Milliseconds settle = 2s) {
  LiveOptions o;
  o.settle = settle;
  o.timeout = 10s;
  return o;
}

// Runs f(i) on a thread per i in `which`, and joins them.
template <typename F>
void on_threads(const std::vector<int>& which, F f) {
  std::vector<std::thread> threads;
  for (int i : which) threads.emplace_back([&f, i] { f(i); });
  for (auto& t : threads) t.join();
}

TEST(LiveMembership, AfterAFailureTheSurvivorsFormTheNextEpochInTheirOldOrderWithTheFurthestAsSource) {
  auto store = std::make_shared<HashStore>(10s);
  std::vector<std::unique_ptr<LiveMembership>> members;
  for (int r = 0; r < 4; ++r) members.push_back(LiveMembership::launched(store, r, 4, quick()));
  // Rank 2 is lost; rank 1 had finished step 24 before the loss, the others hold step 23.
  const std::vector<LivePosition> held{{23, 1}, {24, 1}, {0, 0}, {23, 1}};
  std::vector<LiveEpoch> got(4);
  std::vector<float> sums(4, 0.0f);
  on_threads({0, 1, 3}, [&](int r) {
    got[r] = members[r]->next_epoch(held[r]);
    // The epoch's group works: every member's 1 summed.
    auto group = members[r]->make_group("tcp", 10s, r, 0ms);
    Tensor one = ones({1});
    group->allreduce(one)->wait();
    sums[r] = one.item<float>();
  });
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(got[r].number, 1);
    ASSERT_EQ(got[r].size(), 3);
    EXPECT_EQ(got[r].ids[0], members[0]->id());
    EXPECT_EQ(got[r].ids[1], members[1]->id());
    EXPECT_EQ(got[r].ids[2], members[3]->id());
    EXPECT_EQ(got[r].source, 1) << "the member that got furthest";
    EXPECT_EQ(got[r].positions[1].step, 24);
    EXPECT_EQ(sums[r], 3.0f);
  }
  EXPECT_EQ(got[0].rank, 0);
  EXPECT_EQ(got[1].rank, 1);
  EXPECT_EQ(got[3].rank, 2);
}

TEST(LiveMembership, AmongEqualPositionsTheLowestRankIsTheSource) {
  auto store = std::make_shared<HashStore>(10s);
  std::vector<std::unique_ptr<LiveMembership>> members;
  for (int r = 0; r < 3; ++r) members.push_back(LiveMembership::launched(store, r, 3, quick()));
  std::vector<LiveEpoch> got(3);
  on_threads({1, 2}, [&](int r) { got[r] = members[r]->next_epoch({7, 0}); });
  EXPECT_EQ(got[1].source, 0);
  EXPECT_EQ(got[1].ids[0], members[1]->id());
}

TEST(LiveMembership, AdmittedJoinersCloseTheRoundAtTheExpectedCountWithoutWaitingOutTheSettleTime) {
  auto store = std::make_shared<HashStore>(10s);
  std::vector<std::unique_ptr<LiveMembership>> members;
  for (int r = 0; r < 2; ++r) members.push_back(LiveMembership::launched(store, r, 2, quick(30s)));
  auto joiner = LiveMembership::asking_to_join(store, "j1-test", quick(30s));
  EXPECT_EQ(members[0]->joiners_waiting(), 1);
  EXPECT_EQ(members[0]->admit_joiners(), 1);
  EXPECT_EQ(members[0]->joiners_waiting(), 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<LiveEpoch> got(3);
  on_threads({0, 1, 2}, [&](int i) {
    got[i] = i < 2 ? members[i]->next_epoch({40, 2}) : joiner->join({0, 0}, 10s);
  });
  // A 30 s settle time: only the expected count (2 members + 1 joiner) can have closed it.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  for (const LiveEpoch& e : got) {
    ASSERT_EQ(e.size(), 3);
    EXPECT_EQ(e.ids[2], "j1-test") << "joiners after the members";
    EXPECT_EQ(e.source, 0);
  }
  EXPECT_EQ(got[2].rank, 2);
}

TEST(LiveMembership, AMemberArrivingAfterTheCloseIsLateAndIsAdmittedAtTheNextBoundary) {
  auto store = std::make_shared<HashStore>(10s);
  std::vector<std::unique_ptr<LiveMembership>> members;
  for (int r = 0; r < 3; ++r) members.push_back(LiveMembership::launched(store, r, 3, quick()));
  on_threads({0, 1}, [&](int r) { members[r]->next_epoch({5, 0}); });
  EXPECT_EQ(members[0]->current().size(), 2);
  testing::expect_error<LateForEpoch>([&] { members[2]->next_epoch({5, 0}); }, {"arrived at round 1 after it closed"});
  // It asks to join; nobody admits it yet.
  testing::expect_error<NotAdmittedYet>([&] { members[2]->join({5, 0}, 50ms); }, {"was not admitted within 50 ms"});
  EXPECT_EQ(members[0]->admit_joiners(), 1);
  std::vector<LiveEpoch> got(3);
  on_threads({0, 1, 2}, [&](int r) {
    got[r] = r < 2 ? members[r]->next_epoch({6, 0}) : members[r]->join({5, 0}, 10s);
  });
  EXPECT_EQ(got[2].number, 2);
  EXPECT_EQ(got[2].size(), 3);
  EXPECT_EQ(got[2].rank, 2);
  EXPECT_EQ(got[2].source, 0);
}

TEST(LiveMembership, TheJobsEndReleasesAJoinerWaitingForAdmissionOrInARoundThatNeverMeets) {
  auto store = std::make_shared<HashStore>(10s);
  auto member = LiveMembership::launched(store, 0, 1, quick(100ms));
  auto waiting = LiveMembership::asking_to_join(store, "j0-test", quick(100ms));
  auto admitted = LiveMembership::asking_to_join(store, "j1-test", quick(100ms));
  testing::expect_error<NotAdmittedYet>([&] { waiting->join({0, 0}, 100ms); }, {"was not admitted within 100 ms"});
  // Both admitted, but the job stops at that step boundary: no member comes to the round.
  EXPECT_EQ(member->admit_joiners(), 2);
  std::thread stopper([&] { member->mark_job_done(); });
  const auto start = std::chrono::steady_clock::now();
  testing::expect_error<JobEnded>([&] { admitted->join({0, 0}, 10s); }, {"the job ended"});
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "released at the job's end, not at a timeout";
  EXPECT_TRUE(waiting->job_done());
}

TEST(LiveMembership, MembersAndArrivalsReadBackAndMalformedTextIsRefused) {
  LiveEpoch e;
  e.number = 3;
  e.ids = {"r0-1", "j2-9"};
  e.positions = {{10, 1}, {0, 0}};
  e.source = 0;
  const LiveEpoch back = parse_live_members(3, format_live_members(e), "j2-9");
  EXPECT_EQ(back.ids, e.ids);
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(back.positions[0].step, 10);
  EXPECT_EQ(parse_live_members(3, format_live_members(e), "nobody").rank, -1);
  for (const char* bad : {"", "source x\nr0 1 1\n", "source 2\nr0 1 1\n", "r0 1 1\n", "source 0\nr0 1\n"})
    testing::expect_error<ValueError>([&] { parse_live_members(3, bad, "r0"); }, {"members of epoch 3"});
  EXPECT_FALSE(parse_live_arrival("r1 -1 0").has_value());
  EXPECT_FALSE(parse_live_arrival("r1 1 0 extra").has_value());
  EXPECT_EQ(parse_live_arrival("r1 5 2")->second.epoch, 2);
}

}  // namespace
}  // namespace tessera::dist
