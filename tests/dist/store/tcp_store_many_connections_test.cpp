// The store server under 1,000 connections at once: 300 ranks and 700 silent connections against
// max_connections = 500. It stays up, refuses and logs the 500 extra connections, and every rank is
// still served.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "store_test_helpers.h"
#include "tessera/core/error.h"
#include "testing/connection_flood.h"
#include "testing/fd_limit.h"

namespace tessera::dist {
namespace {

using namespace std::chrono_literals;

size_t count_lines(const std::string& text, const std::string& fragment) {
  size_t n = 0;
  for (size_t at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + 1)) ++n;
  return n;
}

TEST(TcpStoreManyConnections, AThousandConnectionsLeaveItUpAndServingEveryRank) {
  // Both ends of every connection are in this process: ~2,000 descriptors.
  const std::string why = tessera::testing::raise_fd_limit(2300);
  if (!why.empty()) GTEST_SKIP() << why;
  testing::LogCapture log;
  TcpStoreServerOptions options = testing::server_options(log);
  options.max_connections = 500;
  options.hello_timeout = 120s;  // only max_connections closes the flood here
  TcpStoreServer server(options);

  constexpr int kRanks = 300;
  std::vector<std::unique_ptr<TcpStore>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.push_back(std::make_unique<TcpStore>(testing::client_options(server, r)));
    ranks.back()->set("rank/" + std::to_string(r), std::to_string(r));
  }
  std::vector<detail::Socket> flood = tessera::testing::open_silent_connections(server.port(), 700);
  // 200 of the flood take the slots left; the other 500 are closed at once.
  EXPECT_EQ(tessera::testing::wait_until_closed(flood, 500, detail::deadline_after(20s)), 500u);

  // Every rank is served while the flood holds its slots: reads another rank's key, adds to a counter.
  for (int r = 0; r < kRanks; ++r) {
    const int peer = (r + 1) % kRanks;
    EXPECT_EQ(ranks[r]->get_string("rank/" + std::to_string(peer)), std::to_string(peer));
    ranks[r]->add("served", 1);
  }
  EXPECT_EQ(ranks[0]->add("served", 0), kRanks);
  EXPECT_EQ(count_lines(log.joined(), "already 500 connections (max_connections)"), 500u) << "one line per refusal";

  flood.clear();  // the 200 silent ones holding slots go away: a new rank gets in
  bool served = false;
  const auto until = detail::deadline_after(20s);
  while (!served && detail::Clock::now() < until) {  // until the server has seen them close
    try {
      TcpStoreOptions late = testing::client_options(server, kRanks);
      late.connect_timeout = 2s;
      late.timeout = 2s;
      TcpStore store(late);
      served = store.get_string("rank/0") == "0";
    } catch (const Error&) {
    }
  }
  EXPECT_TRUE(served);
}

}  // namespace
}  // namespace tessera::dist
