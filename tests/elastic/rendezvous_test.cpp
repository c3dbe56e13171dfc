// The rendezvous' waits after a generation ends, on an in-memory store with short timeouts: a late
// agent must not wait for ever when the agent that ended the generation died half-way through
// (the chaos run's hang), or when every member of the generation is gone.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "tessera/dist/store/hash_store.h"
#include "tessera/elastic/rendezvous.h"
#include "tessera/elastic/elastic_agent.h"
#include "tessera/elastic/rendezvous_store.h"

namespace tessera::elastic {
namespace {

using namespace std::chrono_literals;

RendezvousOptions short_options(int log_fd = -1) {
  RendezvousOptions o;
  o.run_id = "test";
  o.min_nodes = 1;
  o.max_nodes = 2;
  o.poll = Milliseconds(10);
  o.heartbeat_timeout = Milliseconds(300);
  o.last_call = Milliseconds(200);
  o.join_timeout = Milliseconds(5000);
  o.log_fd = log_fd;
  return o;
}

struct Agents {
  std::unique_ptr<RendezvousStore> store = make_store_rendezvous(std::make_shared<dist::HashStore>(), "memory");
  // Two agents that make generation 0 together (it closes at max_nodes = 2).
  std::pair<Membership, Membership> generation_zero(Rendezvous& a, Rendezvous& b) {
    auto first = std::async(std::launch::async, [&] { return a.join(1, "host-a"); });
    std::optional<Membership> second = b.join(1, "host-b");
    std::optional<Membership> one = first.get();
    EXPECT_TRUE(one && second);
    EXPECT_EQ(one->members.size(), 2u);
    return {*one, *second};
  }
};

// Waits (bounded) for a late agent's join; when it does not come back, ends the job so that the
// stuck wait returns and the test fails instead of hanging.
std::optional<Membership> join_within(std::future<std::optional<Membership>>& joining, Rendezvous& r,
                                      std::chrono::milliseconds limit) {
  if (joining.wait_for(limit) != std::future_status::ready) {
    r.set("failed", "1");
    ADD_FAILURE() << "the late agent was still waiting after " << limit.count() << " ms";
    joining.wait();
    return std::nullopt;
  }
  return joining.get();
}

TEST(RendezvousWaits, AGenerationWhoseEnderDiedBeforeBumpingItIsStartedByALateAgent) {
  Agents agents;
  Rendezvous a(*agents.store, short_options(), "a"), b(*agents.store, short_options(), "b");
  agents.generation_zero(a, b);
  // What the dead agent left: the end and the next round's expectation, but gen still 0.
  agents.store->compare_set("test/g0/end", "", "failure " + std::to_string(unix_ms_now()) + " rank 0 was killed");
  agents.store->set("test/g1/expected", "1");
  ASSERT_FALSE(b.end_generation(0, "failure", "rank 1 exited with status 1", 1));  // lost the race, as the survivors did
  EXPECT_EQ(b.generation(), 0);
  const auto start = std::chrono::steady_clock::now();
  auto joining = std::async(std::launch::async, [&] { return b.join(1, "host-b"); });
  std::optional<Membership> next = join_within(joining, b, 5000ms);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->generation, 1);
  EXPECT_EQ(next->members.size(), 1u);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);  // it waited the heartbeat timeout first
}

TEST(RendezvousWaits, ALateAgentEndsAGenerationWhoseMembersAreAllGone) {
  Agents agents;
  Rendezvous a(*agents.store, short_options(), "a"), b(*agents.store, short_options(), "b"),
      c(*agents.store, short_options(), "c");
  agents.generation_zero(a, b);  // then a and b vanish without a heartbeat
  auto joining = std::async(std::launch::async, [&] { return c.join(1, "host-c"); });
  std::optional<Membership> next = join_within(joining, c, 5000ms);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->generation, 1);
  ASSERT_EQ(next->members.size(), 1u);
  EXPECT_EQ(next->members[0].id, "c");
  std::optional<GenerationEnd> end = c.end_of(0);
  ASSERT_TRUE(end);
  EXPECT_EQ(end->kind, "lost");
  EXPECT_NE(end->text.find("none of generation 0's 2 agent(s) sent a heartbeat"), std::string::npos) << end->text;
}

TEST(RendezvousWaits, ALateAgentWaitsWhileTheMembersBeatAndSaysWhatItWaitsFor) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  Agents agents;
  Rendezvous a(*agents.store, short_options(), "a"), b(*agents.store, short_options(), "b"),
      c(*agents.store, short_options(fds[1]), "c");
  auto [ma, mb] = agents.generation_zero(a, b);
  std::atomic<bool> beating{true};
  std::thread beats([&] {
    for (int i = 0; i < 1000 && beating; ++i) {  // bounded: 1000 × 10 ms
      a.beat(ma);
      b.beat(mb);
      std::this_thread::sleep_for(10ms);
    }
  });
  auto joining = std::async(std::launch::async, [&] { return c.join(1, "host-c"); });
  // The members are alive: the late agent must wait for them to end their generation.
  EXPECT_EQ(joining.wait_for(1000ms), std::future_status::timeout);
  beating = false;
  beats.join();
  std::optional<Membership> next = join_within(joining, c, 5000ms);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->generation, 1);
  std::string logged(8192, '\0');
  ssize_t n = ::read(fds[0], logged.data(), logged.size());
  logged.resize(n > 0 ? static_cast<size_t>(n) : 0);
  ::close(fds[0]);
  ::close(fds[1]);
  // Said once that it waits, and why it went on.
  EXPECT_NE(logged.find("too late for generation 0 (2 agent(s)), waiting for it to end for"), std::string::npos) << logged;
  EXPECT_EQ(logged.find("too late for generation 0"), logged.rfind("too late for generation 0")) << logged;
  EXPECT_NE(logged.find("none of generation 0's 2 agent(s) sent a heartbeat"), std::string::npos) << logged;
}

}  // namespace
}  // namespace tessera::elastic

namespace tessera::elastic {
namespace {

// --rdzv-endpoint: one HOST:PORT, or an etcd cluster's members separated by commas.
TEST(RendezvousEndpoints, EveryMemberOfAnEtcdClusterIsReadAndAnythingElseRefused) {
  const auto members = parse_endpoints("198.18.0.1:2379,198.18.0.2:2379,etcd-c:12379");
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0], (std::pair<std::string, int>{"198.18.0.1", 2379}));
  EXPECT_EQ(members[2], (std::pair<std::string, int>{"etcd-c", 12379}));
  EXPECT_EQ(parse_endpoints("127.0.0.1:29400").size(), 1u);
  for (const char* bad : {"", ",", "a:1,", ",a:1", "a:1,,b:2", "a:1,b", "a:1,b:0", "a:1 b:2"})
    EXPECT_THROW(parse_endpoints(bad), ValueError) << "'" << bad << "'";
}

}  // namespace
}  // namespace tessera::elastic
