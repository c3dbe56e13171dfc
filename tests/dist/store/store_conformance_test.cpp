// Every Store operation, with the same expectations, on each implementation: HashStore,
// PrefixStore over HashStore, TcpStore over a loopback server, and PrefixStore over TcpStore.
// Each "client" is what one rank would hold: the same object for HashStore, a fresh connection
// for TcpStore.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "store_test_helpers.h"
#include "tessera/core/error.h"
#include "tessera/dist/store/hash_store.h"
#include "tessera/dist/store/prefix_store.h"
#include "testing/expect.h"

namespace tessera::dist {
namespace {

using namespace std::chrono_literals;
using tessera::testing::expect_error;
using testing::LogCapture;
using testing::to_bytes;

enum class Kind { kHash, kPrefixHash, kTcp, kPrefixTcp };

std::string kind_name(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kHash: return "Hash";
    case Kind::kPrefixHash: return "PrefixOverHash";
    case Kind::kTcp: return "Tcp";
    case Kind::kPrefixTcp: return "PrefixOverTcp";
  }
  return "unknown";
}

class StoreConformanceTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    Kind k = GetParam();
    if (k == Kind::kHash || k == Kind::kPrefixHash) hash_ = std::make_shared<HashStore>(10s);
    if (k == Kind::kTcp || k == Kind::kPrefixTcp) server_ = std::make_unique<TcpStoreServer>(testing::server_options(log_));
  }
  void TearDown() override {
    if (server_) {
      EXPECT_EQ(log_.joined(), "") << "the server dropped a well-behaved client";
    }
  }

  // A new client, as rank `rank` would hold it.
  std::shared_ptr<Store> client(int rank = 0) {
    std::shared_ptr<Store> base = hash_;
    if (server_) base = std::make_shared<TcpStore>(testing::client_options(*server_, rank));
    Kind k = GetParam();
    if (k == Kind::kPrefixHash || k == Kind::kPrefixTcp) return std::make_shared<PrefixStore>("group0", base);
    return base;
  }

  LogCapture log_;
  std::shared_ptr<HashStore> hash_;
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_P(StoreConformanceTest, SetThenGetReturnsTheBytes) {
  auto s = client();
  Bytes binary = {0, 1, 2, 255, 0, 7};
  s->set("bin", binary);
  EXPECT_EQ(s->get("bin"), binary);
  s->set("empty", Bytes{});
  EXPECT_EQ(s->get("empty"), Bytes{});
  s->set("text", std::string("hello"));
  EXPECT_EQ(s->get_string("text"), "hello");
  s->set("text", std::string("again"));
  EXPECT_EQ(s->get_string("text"), "again");
}

TEST_P(StoreConformanceTest, AddCreatesAtZeroAndAccumulates) {
  auto s = client();
  EXPECT_EQ(s->add("n", 5), 5);
  EXPECT_EQ(s->add("n", -7), -2);
  EXPECT_EQ(s->add("n", 0), -2);
  EXPECT_EQ(s->get_string("n"), "-2");  // counters are decimal text, as in c10d
  s->set("text", std::string("abc"));
  expect_error<ValueError>([&] { s->add("text", 1); }, {"add]", "text", "not a decimal integer"});
  s->set("big", std::to_string(INT64_MAX));
  expect_error<ValueError>([&] { s->add("big", 1); }, {"overflows"});
}

TEST_P(StoreConformanceTest, CompareSetFollowsItsContract) {
  auto s = client();
  // An absent key matches an empty `expected`.
  EXPECT_EQ(s->compare_set("k", {}, to_bytes("one")), to_bytes("one"));
  // A mismatch leaves the value and returns it.
  EXPECT_EQ(s->compare_set("k", to_bytes("zzz"), to_bytes("two")), to_bytes("one"));
  EXPECT_EQ(s->get_string("k"), "one");
  // A match swaps.
  EXPECT_EQ(s->compare_set("k", to_bytes("one"), to_bytes("two")), to_bytes("two"));
  EXPECT_EQ(s->get_string("k"), "two");
  // An absent key with a non-empty `expected` stays absent.
  EXPECT_EQ(s->compare_set("absent", to_bytes("x"), to_bytes("y")), Bytes{});
  EXPECT_FALSE(s->check({"absent"}));
}

TEST_P(StoreConformanceTest, DeleteKeyAndCheck) {
  auto s = client();
  EXPECT_TRUE(s->check({}));
  s->set("a", std::string("1"));
  s->set("b", std::string("2"));
  EXPECT_TRUE(s->check({"a", "b"}));
  EXPECT_FALSE(s->check({"a", "c"}));
  EXPECT_TRUE(s->delete_key("a"));
  EXPECT_FALSE(s->delete_key("a"));
  EXPECT_FALSE(s->check({"a"}));
  EXPECT_TRUE(s->check({"b"}));
}

TEST_P(StoreConformanceTest, WaitReturnsAtOnceWhenKeysExist) {
  auto s = client();
  s->set("a", std::string("1"));
  s->wait({"a"}, 100ms);
  s->wait({}, 0ms);
}

TEST_P(StoreConformanceTest, WaitTimesOutNamingTheMissingKeys) {
  auto s = client(3);
  s->set("a", std::string("1"));
  auto start = std::chrono::steady_clock::now();
  bool prefixed = GetParam() == Kind::kPrefixHash || GetParam() == Kind::kPrefixTcp;
  std::string missing = prefixed ? "waiting for keys: group0/b, group0/c" : "waiting for keys: b, c";
  expect_error<TimeoutError>([&] { s->wait({"a", "b", "c"}, 100ms); },
                             {"wait]", "timed out after 100 ms", missing.c_str()});
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 100ms);
  EXPECT_LT(elapsed, 3s);
  // The store is still usable after a timeout.
  s->set("b", std::string("2"));
  EXPECT_EQ(s->get_string("b"), "2");
}

TEST_P(StoreConformanceTest, GetTimesOutAfterTheStoreTimeout) {
  auto s = client(2);
  bool prefixed = GetParam() == Kind::kPrefixHash || GetParam() == Kind::kPrefixTcp;
  // get() follows the timeout of the store that does the waiting (the inner one under a prefix).
  Store& waiter = prefixed ? *static_cast<PrefixStore&>(*s).inner() : *s;
  waiter.set_timeout(100ms);
  std::string key = prefixed ? "keys: group0/nothing" : "keys: nothing";
  expect_error<TimeoutError>([&] { s->get("nothing"); }, {"get]", "timed out after 100 ms", key.c_str()});
}

TEST_P(StoreConformanceTest, GetBlocksUntilAnotherClientSetsTheKey) {
  auto reader = client(1);
  auto writer = client(2);
  Bytes got;
  std::thread t([&] {
    reader->add("reader_started", 1);
    got = reader->get("late");  // blocks until the writer's set
  });
  writer->wait({"reader_started"}, 10s);
  writer->set("late", std::string("value"));
  t.join();
  EXPECT_EQ(got, to_bytes("value"));
}

TEST_P(StoreConformanceTest, ConcurrentAddsFromEightClientsAreExact) {
  constexpr int kClients = 8, kAddsEach = 50;
  std::vector<std::shared_ptr<Store>> clients;
  for (int r = 0; r < kClients; ++r) clients.push_back(client(r));
  std::vector<std::vector<int64_t>> returned(kClients);
  std::vector<std::thread> threads;
  for (int r = 0; r < kClients; ++r)
    threads.emplace_back([&, r] {
      for (int i = 0; i < kAddsEach; ++i) returned[r].push_back(clients[r]->add("counter", 1));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(clients[0]->add("counter", 0), kClients * kAddsEach);
  // Every add saw a distinct value: no two were merged.
  std::set<int64_t> all;
  for (auto& v : returned) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t(kClients * kAddsEach));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kClients * kAddsEach);
}

TEST_P(StoreConformanceTest, RendezvousOfEightRanks) {
  // Each rank publishes its address and waits for everyone's: the pattern every process group
  // starts with.
  constexpr int kRanks = 8;
  std::vector<std::shared_ptr<Store>> clients;
  for (int r = 0; r < kRanks; ++r) clients.push_back(client(r));
  std::vector<std::string> keys;
  for (int r = 0; r < kRanks; ++r) keys.push_back("addr/" + std::to_string(r));
  std::vector<std::vector<std::string>> seen(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      clients[r]->set(keys[r], "host" + std::to_string(r));
      clients[r]->wait(keys, 10s);
      for (const auto& k : keys) seen[r].push_back(clients[r]->get_string(k));
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r)
    for (int q = 0; q < kRanks; ++q) EXPECT_EQ(seen[r][q], "host" + std::to_string(q));
}

TEST_P(StoreConformanceTest, ManyWaitersWokenByOneSet) {
  constexpr int kWaiters = 6;
  std::vector<std::shared_ptr<Store>> clients;
  for (int r = 0; r < kWaiters + 1; ++r) clients.push_back(client(r));
  std::atomic<int> woken{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWaiters; ++r)
    threads.emplace_back([&, r] {
      if (clients[r]->add("parked", 1) == kWaiters) clients[r]->set("all_parked", std::string("1"));
      clients[r]->wait({"go"}, 10s);
      woken++;
    });
  // Wait (through the store) until every waiter has announced itself, then release them all.
  auto& setter = clients[kWaiters];
  setter->wait({"all_parked"}, 10s);
  setter->set("go", std::string("1"));
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken.load(), kWaiters);
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreConformanceTest,
                         ::testing::Values(Kind::kHash, Kind::kPrefixHash, Kind::kTcp, Kind::kPrefixTcp), kind_name);

}  // namespace
}  // namespace tessera::dist
