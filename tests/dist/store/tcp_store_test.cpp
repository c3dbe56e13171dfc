// TcpStore and TcpStoreServer over loopback: tokens, timeouts that name rank and address,
// connection retries, a server that goes away, large values and shared clients.
#include "tessera/dist/store/tcp_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "store_test_helpers.h"
#include "tessera/core/error.h"
#include "testing/expect.h"

namespace tessera::dist {
namespace {

using namespace std::chrono_literals;
using tessera::testing::expect_error;
using testing::LogCapture;
using testing::to_bytes;

class TcpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { server_ = std::make_unique<TcpStoreServer>(testing::server_options(log_)); }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  LogCapture log_;
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreTest, ServerListensOnLoopbackAndReportsItsPort) {
  EXPECT_EQ(server_->host(), "127.0.0.1");
  EXPECT_NE(server_->port(), 0);
  EXPECT_EQ(server_->address(), address());
  TcpStore s(testing::client_options(*server_));
  EXPECT_EQ(s.address(), address());
}

TEST_F(TcpStoreTest, WrongTokenIsRejectedAndLogged) {
  auto options = testing::client_options(*server_, 5);
  options.token = "not-the-token";
  expect_error<ValueError>([&] { TcpStore s(options); },
                           {"rank 5", ("job token rejected by the store at " + address()).c_str()});
  // The rejection is logged before the server closes the connection, i.e. before the client's
  // constructor returned.
  EXPECT_TRUE(log_.contains("rank 5): wrong job token")) << log_.joined();
}

TEST_F(TcpStoreTest, EmptyTokensAreCallerMistakes) {
  TcpStoreServerOptions server_options;
  expect_error<ValueError>([&] { TcpStoreServer s(server_options); }, {"[TcpStoreServer]", "token is empty"});
  auto options = testing::client_options(*server_);
  options.token.clear();
  expect_error<ValueError>([&] { TcpStore s(options); }, {"[TcpStore]", "token is empty"});
}

TEST_F(TcpStoreTest, TimeoutsNameOpKeysRankAndAddress) {
  auto options = testing::client_options(*server_, 3);
  options.timeout = 100ms;
  TcpStore s(options);
  s.set("a", std::string("1"));
  expect_error<TimeoutError>([&] { s.wait({"a", "b"}, 100ms); },
                             {"[TcpStore::wait] rank 3 timed out after 100 ms waiting for keys: b",
                              ("store at " + address()).c_str()});
  expect_error<TimeoutError>([&] { s.get("c"); },
                             {"[TcpStore::get] rank 3 timed out after 100 ms waiting for keys: c",
                              ("store at " + address()).c_str()});
  // The server answered the timeouts itself, so the connection is still in step.
  EXPECT_EQ(s.get_string("a"), "1");
  EXPECT_EQ(log_.joined(), "");
}

TEST_F(TcpStoreTest, OneClientSharedByEightThreads) {
  TcpStore s(testing::client_options(*server_));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) s.add("shared", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(s.add("shared", 0), 200);
}

TEST_F(TcpStoreTest, LargeValuesCrossInPieces) {
  TcpStore a(testing::client_options(*server_, 0));
  TcpStore b(testing::client_options(*server_, 1));
  Bytes big(6 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 131 + 7);
  a.set("big", big);
  EXPECT_EQ(b.get("big"), big);
}

TEST_F(TcpStoreTest, ValueAboveTheClientLimitFailsBeforeSending) {
  auto options = testing::client_options(*server_);
  options.max_message_bytes = 1024;
  TcpStore s(options);
  expect_error<ValueError>([&] { s.set("k", Bytes(4096)); }, {"[TcpStore::set]", "above max_message_bytes 1024"});
  s.set("k", Bytes(10));  // the connection was not used, so it is fine
  EXPECT_EQ(s.get("k").size(), 10u);
}

TEST(TcpStoreServerLimitTest, FrameAboveTheServerLimitDropsOnlyThatClient) {
  LogCapture log;
  auto server_options = testing::server_options(log);
  server_options.max_message_bytes = 1024;
  TcpStoreServer server(server_options);
  TcpStore bystander(testing::client_options(server, 0));
  TcpStore big(testing::client_options(server, 1));
  expect_error<PeerFailureError>([&] { big.set("k", Bytes(4096)); },
                                 {"[TcpStore::set] rank 1", "lost the connection to the store at"});
  EXPECT_TRUE(log.contains("(rank 1): malformed message: frame length")) << log.joined();
  bystander.set("still", std::string("serving"));
  EXPECT_EQ(bystander.get_string("still"), "serving");
}

TEST_F(TcpStoreTest, ServerStoppedWhileAClientWaitsFailsPromptly) {
  TcpStore waiter(testing::client_options(*server_, 4));
  TcpStore other(testing::client_options(*server_, 5));
  std::string error;
  auto start = std::chrono::steady_clock::now();
  std::thread t([&] {
    waiter.add("waiting", 1);
    try {
      waiter.wait({"never"}, 30s);
    } catch (const PeerFailureError& e) {
      error = e.what();
    }
  });
  other.wait({"waiting"}, 10s);
  server_->stop();
  t.join();
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, 5s) << "the waiter should fail when the store closes, not at its 30 s timeout";
  EXPECT_NE(error.find("[TcpStore::wait] rank 4"), std::string::npos) << error;
  EXPECT_NE(error.find("lost the connection to the store at " + address()), std::string::npos) << error;
  // Later calls fail at once too, and so do calls on clients that were idle.
  expect_error<PeerFailureError>([&] { waiter.set("k", std::string("v")); }, {"[TcpStore::set] rank 4", address().c_str()});
  expect_error<PeerFailureError>([&] { other.get("k"); }, {"[TcpStore::get] rank 5", address().c_str()});
  server_->stop();  // idempotent
}

TEST_F(TcpStoreTest, DestroyingTheServerWithClientsConnectedDoesNotHang) {
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int r = 0; r < 4; ++r) clients.push_back(std::make_unique<TcpStore>(testing::client_options(*server_, r)));
  std::atomic<bool> failed{false};
  std::thread t([&] {
    clients[0]->add("parked", 1);
    try {
      clients[0]->get("never");
    } catch (const PeerFailureError&) {
      failed = true;
    }
  });
  clients[1]->wait({"parked"}, 10s);
  server_.reset();
  t.join();
  EXPECT_TRUE(failed.load());
}

TEST(TcpStoreConnectTest, ClientStartedBeforeTheServerConnectsWhenItAppears) {
  // Find a free port, release it, and start the server there after the client began retrying.
  uint16_t port;
  {
    LogCapture log;
    TcpStoreServer probe(testing::server_options(log));
    port = probe.port();
  }
  LogCapture log;
  std::unique_ptr<TcpStoreServer> server;
  std::string value;
  std::thread client([&] {
    TcpStoreOptions options;
    options.port = port;
    options.token = testing::kToken;
    options.connect_timeout = 10s;
    TcpStore s(options);
    value = s.get_string("published");
  });
  auto server_options = testing::server_options(log);
  server_options.port = port;
  server = std::make_unique<TcpStoreServer>(server_options);
  TcpStore publisher(testing::client_options(*server));
  publisher.set("published", std::string("yes"));
  client.join();
  EXPECT_EQ(value, "yes");
}

TEST(TcpStoreConnectTest, NoServerTimesOutNamingTheAddress) {
  // A socket bound but not listening holds a port that refuses connections, and that no test
  // running beside this one can take.
  detail::Socket placeholder(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(placeholder.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  uint16_t port = detail::local_port(placeholder.fd());
  TcpStoreOptions options;
  options.port = port;
  options.token = testing::kToken;
  options.rank = 7;
  options.connect_timeout = 150ms;
  auto start = std::chrono::steady_clock::now();
  expect_error<TimeoutError>([&] { TcpStore s(options); },
                             {"[TcpStore] rank 7 could not connect to the store at 127.0.0.1:",
                              std::to_string(port).c_str(), "within 150 ms"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(TcpStoreConnectTest, PortZeroIsACallerMistake) {
  TcpStoreOptions options;
  options.token = testing::kToken;
  expect_error<ValueError>([&] { TcpStore s(options); }, {"port 0"});
}

TEST(TcpStoreServerTest, BusyPortIsAnIoErrorNamingIt) {
  LogCapture log;
  TcpStoreServer first(testing::server_options(log));
  auto options = testing::server_options(log);
  options.port = first.port();
  expect_error<IoError>([&] { TcpStoreServer second(options); },
                        {"[TcpStoreServer] cannot listen on", first.address().c_str()});
}

}  // namespace
}  // namespace tessera::dist
