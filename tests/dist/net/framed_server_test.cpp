// FramedServer (dist/net/framed_server.h) under more connections than it takes: the extra ones are
// closed at once and logged, and the connections it holds are still served.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/dist/net/framed_client.h"
#include "tessera/dist/net/framed_server.h"
#include "tessera/dist/net/socket.h"
#include "testing/connection_flood.h"
#include "testing/fd_limit.h"

namespace tessera::dist::net {
namespace {

using detail::FrameWriter;

const std::string kToken = "0123456789abcdef0123456789abcdef";

// Answers every frame with its opcode + 1.
class Echo : public FramedServer::Handler {
 public:
  explicit Echo(FramedServer& server) : server_(server) {}
  void on_connect(ConnectionId, int64_t) override {}
  void on_frame(ConnectionId id, uint8_t opcode, detail::FrameReader&) override {
    server_.send(id, FrameWriter(static_cast<uint8_t>(opcode + 1)).finish());
  }
  void on_disconnect(ConnectionId, const std::string&) override {}

 private:
  FramedServer& server_;
};

FramedClientOptions client_options(uint16_t port) {
  FramedClientOptions o;
  o.port = port;
  o.token = kToken;
  o.connect_timeout = Milliseconds(5000);
  return o;
}

TEST(FramedServer, ConnectionsPastTheLimitAreRefusedAndTheOthersStillServed) {
  FramedServerOptions o;
  o.name = "test server";
  o.token = kToken;
  o.max_connections = 3;
  std::mutex mu;
  std::vector<std::string> lines;
  o.log = [&](const std::string& line) {
    std::lock_guard lock(mu);
    lines.push_back(line);
  };
  FramedServer server(o);
  Echo echo(server);
  std::thread loop([&] { server.run(echo); });
  std::vector<std::unique_ptr<FramedClient>> kept;
  for (int i = 0; i < 3; ++i) kept.push_back(std::make_unique<FramedClient>(client_options(server.port())));
  // The fourth is closed before its hello is answered.
  EXPECT_THROW(FramedClient extra(client_options(server.port())), Error);
  for (auto& c : kept) {
    const auto deadline = detail::deadline_after(Milliseconds(5000));
    c->send(FrameWriter(10).finish(), deadline, "echo");
    EXPECT_EQ(c->receive(deadline, "echo").at(0), 11);
  }
  server.stop();
  loop.join();
  bool refused = false;
  for (const auto& line : lines) refused = refused || line.find("already 3 connections (max_connections)") != std::string::npos;
  EXPECT_TRUE(refused);
}

// A raw connection that writes `bytes` and returns whether the server closed it within 5 s.
bool closed_after(uint16_t port, const Bytes& bytes) {
  std::string error;
  detail::Socket sock = detail::try_connect_tcp("127.0.0.1", port, detail::deadline_after(Milliseconds(5000)), &error);
  if (!sock.valid()) return true;
  if (!bytes.empty()) detail::send_all(sock.fd(), bytes.data(), bytes.size(), detail::deadline_after(Milliseconds(5000)));
  uint8_t sink[256];
  for (;;) {  // read whatever the server answers until it closes (or 5 s pass)
    detail::IoResult r = detail::recv_exact(sock.fd(), sink, 1, detail::deadline_after(Milliseconds(5000)));
    if (r.status == detail::IoStatus::kClosed || r.status == detail::IoStatus::kError) return true;
    if (r.status == detail::IoStatus::kTimeout) return false;
  }
}

// Every kind of hostile client: silence (closed after the hello timeout), half a frame then silence,
// a frame over the hello limit, garbage before the hello, a wrong token, a flood of connections.
// Each bad one is closed, and an honest client is served all along.
TEST(FramedServer, HostileClientsAreClosedAndHonestOnesServed) {
  FramedServerOptions o;
  o.name = "test server";
  o.token = kToken;
  o.hello_timeout = Milliseconds(300);  // short, for the silent ones
  o.max_connections = 64;
  o.log = [](const std::string&) {};
  FramedServer server(o);
  Echo echo(server);
  std::thread loop([&] { server.run(echo); });
  auto honest_round_trip = [&] {
    FramedClient c(client_options(server.port()));
    const auto deadline = detail::deadline_after(Milliseconds(5000));
    c.send(FrameWriter(20).finish(), deadline, "echo");
    return c.receive(deadline, "echo").at(0) == 21;
  };
  EXPECT_TRUE(closed_after(server.port(), {}));                           // says nothing
  EXPECT_TRUE(closed_after(server.port(), {9, 0, 0}));                    // half a length
  EXPECT_TRUE(closed_after(server.port(), {0xff, 0xff, 0xff, 0x7f, 1}));  // a 2 GiB "hello"
  Bytes garbage(300, 0x5a);
  EXPECT_TRUE(closed_after(server.port(), garbage));                      // garbage before the hello
  Bytes wrong = FrameWriter(kHelloOpcode).u32(1).i64(0).str("not-the-token").finish();
  EXPECT_TRUE(closed_after(server.port(), wrong));                        // wrong token
  EXPECT_TRUE(honest_round_trip());
  // A flood: 200 silent connections against a limit of 64; the extra ones are refused, the rest
  // closed by the hello timeout, and then an honest client gets in.
  std::vector<detail::Socket> flood;
  for (int i = 0; i < 200; ++i) {
    std::string error;
    flood.push_back(detail::try_connect_tcp("127.0.0.1", server.port(), detail::deadline_after(Milliseconds(2000)), &error));
  }
  bool served = false;
  const auto until = detail::deadline_after(Milliseconds(5000));
  while (!served && detail::Clock::now() < until) {  // the flood's slots free after 300 ms
    try {
      served = honest_round_trip();
    } catch (const Error&) {
    }
  }
  EXPECT_TRUE(served);
  server.stop();
  loop.join();
}

// 1,000 connections at once: 100 honest clients, then 900 silent ones against a limit of 500. The
// 500 past the limit are closed at once, each with a log line; the 400 silent ones that got a slot
// keep it (the hello timeout is long here); the honest ones are served throughout, and once the
// flood goes away a new client gets in. Both ends live in this process, hence ~2,000 descriptors.
TEST(FramedServer, AThousandConnectionsLeaveItUpAndServingTheHonestOnes) {
  const std::string why = tessera::testing::raise_fd_limit(2300);
  if (!why.empty()) GTEST_SKIP() << why;
  FramedServerOptions o;
  o.name = "test server";
  o.token = kToken;
  o.max_connections = 500;
  o.hello_timeout = Milliseconds(120000);  // only max_connections closes the flood here
  std::mutex mu;
  size_t refusals = 0;
  o.log = [&](const std::string& line) {
    std::lock_guard lock(mu);
    if (line.find("already 500 connections (max_connections)") != std::string::npos) ++refusals;
  };
  FramedServer server(o);
  Echo echo(server);
  std::thread loop([&] { server.run(echo); });
  auto round_trip = [](FramedClient& c, uint8_t opcode) {
    const auto deadline = detail::deadline_after(Milliseconds(5000));
    c.send(FrameWriter(opcode).finish(), deadline, "echo");
    return c.receive(deadline, "echo").at(0) == opcode + 1;
  };

  std::vector<std::unique_ptr<FramedClient>> honest;
  for (int i = 0; i < 100; ++i) honest.push_back(std::make_unique<FramedClient>(client_options(server.port())));
  std::vector<detail::Socket> flood = tessera::testing::open_silent_connections(server.port(), 900);
  EXPECT_EQ(tessera::testing::wait_until_closed(flood, 500, detail::deadline_after(Milliseconds(20000))), 500u);
  for (auto& c : honest) EXPECT_TRUE(round_trip(*c, 30));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(refusals, 500u) << "each refused connection is logged once";
  }

  flood.clear();  // the 400 silent ones holding slots go away
  bool served = false;
  const auto until = detail::deadline_after(Milliseconds(20000));
  while (!served && detail::Clock::now() < until) {  // until the server has seen them close
    try {
      FramedClient late(client_options(server.port()));
      served = round_trip(late, 40);
    } catch (const Error&) {
    }
  }
  EXPECT_TRUE(served);
  server.stop();
  loop.join();
}

}  // namespace
}  // namespace tessera::dist::net
