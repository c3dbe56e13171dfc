// FramedServer (dist/net/framed_server.h) under more connections than it takes: the extra ones are
// closed at once and logged, and the connections it holds are still served.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/dist/net/framed_client.h"
#include "tessera/dist/net/framed_server.h"

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

}  // namespace
}  // namespace tessera::dist::net
