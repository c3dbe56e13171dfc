#include "tessera/dist/store/tcp_store_server.h"

#include <cstdio>
#include <list>
#include <mutex>

#include "tessera/core/error.h"
#include "tessera/dist/store/key_value_table.h"
#include "tessera/dist/net/framed_server.h"
#include "tessera/dist/net/socket.h"
#include "tessera/dist/store/tcp_store_protocol.h"

namespace tessera::dist {

namespace {

using detail::Clock;
using detail::FrameReader;
using detail::FrameWriter;
using detail::ProtocolError;
using detail::StoreOp;
using detail::StoreReply;
using net::ConnectionId;
using tessera::detail::concat;

// The store's requests over the framed server's connections: a get or wait whose keys are missing
// holds its connection (later requests queue behind it, so replies stay in order) until a set, add
// or compare_set makes the keys appear or its timeout passes.
class StoreHandler : public net::FramedServer::Handler {
 public:
  explicit StoreHandler(net::FramedServer& server) : server_(server) {}

  void on_connect(ConnectionId, int64_t) override {}

  void on_frame(ConnectionId id, uint8_t opcode, FrameReader& r) override {
    switch (StoreOp(opcode)) {
      case StoreOp::kSet: {
        std::string key = r.str();
        Bytes value = r.bytes();
        r.expect_end();
        table_.set(key, std::move(value));
        reply(id, FrameWriter(uint8_t(StoreReply::kOk)));
        wake_waiters();
        return;
      }
      case StoreOp::kGet: {
        std::string key = r.str();
        int64_t timeout_ms = r.i64();
        r.expect_end();
        if (const Bytes* v = table_.find(key)) return reply(id, FrameWriter(uint8_t(StoreReply::kValue)).bytes(*v));
        return park(id, StoreOp::kGet, {key}, timeout_ms);
      }
      case StoreOp::kAdd: {
        std::string key = r.str();
        int64_t delta = r.i64();
        r.expect_end();
        int64_t value;
        try {
          value = table_.add("TcpStore::add", key, delta);
        } catch (const ValueError& e) {
          return reply(id, FrameWriter(uint8_t(StoreReply::kError)).str(e.what()));
        }
        reply(id, FrameWriter(uint8_t(StoreReply::kInt)).i64(value));
        wake_waiters();
        return;
      }
      case StoreOp::kCompareSet: {
        std::string key = r.str();
        Bytes expected = r.bytes();
        Bytes desired = r.bytes();
        r.expect_end();
        bool changed = false;
        Bytes after = table_.compare_set(key, expected, desired, &changed);
        reply(id, FrameWriter(uint8_t(StoreReply::kValue)).bytes(after));
        if (changed) wake_waiters();
        return;
      }
      case StoreOp::kDeleteKey: {
        std::string key = r.str();
        r.expect_end();
        return reply(id, FrameWriter(uint8_t(StoreReply::kBool)).u8(table_.erase(key)));
      }
      case StoreOp::kCheck: {
        std::vector<std::string> keys = r.keys();
        r.expect_end();
        return reply(id, FrameWriter(uint8_t(StoreReply::kBool)).u8(table_.missing(keys).empty()));
      }
      case StoreOp::kWait: {
        std::vector<std::string> keys = r.keys();
        int64_t timeout_ms = r.i64();
        r.expect_end();
        if (table_.missing(keys).empty()) return reply(id, FrameWriter(uint8_t(StoreReply::kOk)));
        return park(id, StoreOp::kWait, std::move(keys), timeout_ms);
      }
      case StoreOp::kHello:
        throw ProtocolError("a second hello on an authenticated connection");
    }
    throw ProtocolError(concat("unknown opcode ", int(opcode)));
  }

  void on_disconnect(ConnectionId id, const std::string&) override {
    waiters_.remove_if([&](const Waiter& w) { return w.connection == id; });
  }

  Clock::time_point next_deadline() override {
    Clock::time_point next = Clock::time_point::max();
    for (const auto& w : waiters_) next = std::min(next, w.deadline);
    return next;
  }

  // Waits whose time is up are answered kTimeout, naming the keys still missing.
  void on_tick() override {
    const auto now = Clock::now();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      reply(it->connection, FrameWriter(uint8_t(StoreReply::kTimeout)).keys(table_.missing(it->keys)));
      server_.release(it->connection);
      it = waiters_.erase(it);
    }
  }

 private:
  struct Waiter {
    ConnectionId connection = 0;
    StoreOp op = StoreOp::kWait;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  void reply(ConnectionId id, FrameWriter frame) { server_.send(id, frame.finish()); }

  void park(ConnectionId id, StoreOp op, std::vector<std::string> keys, int64_t timeout_ms) {
    server_.hold(id);
    waiters_.push_back({id, op, std::move(keys), detail::deadline_after(Milliseconds(std::max<int64_t>(timeout_ms, 0)))});
  }

  void wake_waiters() {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (!table_.missing(it->keys).empty()) {
        ++it;
        continue;
      }
      if (it->op == StoreOp::kGet)
        reply(it->connection, FrameWriter(uint8_t(StoreReply::kValue)).bytes(*table_.find(it->keys[0])));
      else
        reply(it->connection, FrameWriter(uint8_t(StoreReply::kOk)));
      server_.release(it->connection);
      it = waiters_.erase(it);
    }
  }

  net::FramedServer& server_;
  detail::KeyValueTable table_;
  std::list<Waiter> waiters_;
};

}  // namespace

struct TcpStoreServer::State {
  std::unique_ptr<net::FramedServer> server;
  std::function<void(const std::string&)> log;
  std::mutex stop_mu;
};

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options) : host_(options.host) {
  TESSERA_CHECK(!options.token.empty(), "[TcpStoreServer] the job token is empty; pass the token the launcher "
                                        "generated (TESSERA_JOB_TOKEN) so only this job's processes can connect");
  TESSERA_CHECK(options.max_message_bytes >= 64, "[TcpStoreServer] max_message_bytes ", options.max_message_bytes,
                " is too small");
  if (!options.log) options.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  net::FramedServerOptions framed;
  framed.name = "TcpStoreServer";
  framed.host = options.host;
  framed.port = options.port;
  framed.token = options.token;
  framed.protocol_version = detail::kStoreProtocolVersion;
  framed.max_message_bytes = options.max_message_bytes;
  framed.max_connections = options.max_connections;
  framed.hello_timeout = options.hello_timeout;
  framed.backlog = options.backlog;
  framed.log = options.log;
  state_ = std::make_unique<State>();
  state_->log = options.log;
  state_->server = std::make_unique<net::FramedServer>(std::move(framed));
  port_ = state_->server->port();
  thread_ = std::thread([this] {
    net::FramedServer& server = *state_->server;
    StoreHandler handler(server);
    try {
      server.run(handler);  // until stop(); then every connection closes, which is what tells blocked clients
    } catch (const std::exception& e) {
      state_->log(concat("[TcpStoreServer ", server.address(), "] ", e.what(), "; closing every connection"));
    }
  });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

std::string TcpStoreServer::address() const { return detail::format_address(host_, port_); }

void TcpStoreServer::stop() {
  std::lock_guard lock(state_->stop_mu);
  if (!thread_.joinable()) return;
  state_->server->stop();
  thread_.join();
}

}  // namespace tessera::dist
