#include "tessera/dist/store/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <mutex>

#include "tessera/core/error.h"
#include "tessera/dist/store/key_value_table.h"
#include "tessera/dist/net/socket.h"
#include "tessera/dist/net/token_check.h"
#include "tessera/dist/store/tcp_store_protocol.h"

namespace tessera::dist {

namespace {

using detail::Clock;
using detail::FrameReader;
using detail::FrameWriter;
using detail::ProtocolError;
using detail::StoreOp;
using detail::StoreReply;
using tessera::detail::concat;

// A hello is a version, a rank and a token: a few hundred bytes. Until a connection has
// authenticated, frames above this size are refused, so an unauthenticated peer cannot make the
// server buffer max_message_bytes.
constexpr size_t kHelloMaxBytes = 64 * 1024;
constexpr size_t kReadChunk = 64 * 1024;
// Reads per client per poll round, so that one client streaming data cannot starve the others.
constexpr int kReadsPerRound = 16;
// Stop parsing a client's requests while this much of its replies is unsent (it is not reading).
constexpr size_t kOutHighWater = size_t(4) << 20;
constexpr auto kAcceptPause = Milliseconds(100);

struct Client {
  uint64_t id = 0;
  detail::Socket sock;
  std::string peer;
  int64_t rank = -1;
  bool authenticated = false;
  bool waiting = false;  // a get/wait is parked; later requests queue behind it, so replies stay in order
  bool closing = false;  // rejected: closed once the rejection is flushed
  bool dead = false;     // removed at the end of the poll round
  Bytes in;              // received bytes not yet parsed: at most one partial frame plus one read
  Bytes out;
  size_t out_sent = 0;
  Clock::time_point hello_due{};  // closed if not authenticated by then

  size_t pending_out() const { return out.size() - out_sent; }
  bool paused() const { return waiting || closing || pending_out() > kOutHighWater; }
};

struct Waiter {
  uint64_t client = 0;
  StoreOp op = StoreOp::kWait;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};


}  // namespace

struct TcpStoreServer::State {
  TcpStoreServerOptions options;
  std::string address;
  detail::Socket listener;
  detail::Socket wake_read, wake_write;  // stop() writes a byte to interrupt poll()
  std::atomic<bool> stopping{false};
  std::mutex stop_mu;

  // Everything below is touched only by the server thread.
  std::map<uint64_t, Client> clients;
  uint64_t next_id = 1;
  std::list<Waiter> waiters;
  std::vector<uint64_t> runnable;  // clients just unparked, whose queued requests now run
  detail::KeyValueTable table;
  Clock::time_point accept_paused_until{};
  Bytes read_buf = Bytes(kReadChunk);

  void run();
  void accept_all();
  void handle_events(Client& c, short revents);
  void read_some(Client& c);
  void process_frames(Client& c);
  void handle_frame(Client& c, const uint8_t* data, size_t size);
  void handle_hello(Client& c, FrameReader& r);
  void park(Client& c, StoreOp op, std::vector<std::string> keys, int64_t timeout_ms);
  void wake_waiters();
  void expire_waiters();
  void expire_hellos();
  int poll_timeout() const;
  void reply(Client& c, const Bytes& frame);
  void flush(Client& c);
  void drop(Client& c, const std::string& reason);
  void sweep_dead();
  void log(const std::string& line) const { options.log(concat("[TcpStoreServer ", address, "] ", line)); }
  std::string who(const Client& c) const {
    return c.rank >= 0 ? concat(c.peer, " (rank ", c.rank, ")") : c.peer;
  }
};

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options) : host_(options.host) {
  TESSERA_CHECK(!options.token.empty(), "[TcpStoreServer] the job token is empty; pass the token the launcher "
                                        "generated (TESSERA_JOB_TOKEN) so only this job's processes can connect");
  TESSERA_CHECK(options.max_message_bytes >= 64, "[TcpStoreServer] max_message_bytes ", options.max_message_bytes,
                " is too small");
  if (!options.log)
    options.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  state_ = std::make_unique<State>();
  State& s = *state_;
  s.listener = detail::listen_tcp(options.host, options.port, options.backlog);
  port_ = detail::local_port(s.listener.fd());
  s.address = detail::format_address(host_, port_);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0)
    throw IoError(concat("[TcpStoreServer] pipe2 failed: ", std::strerror(errno)));
  s.wake_read = detail::Socket(pipe_fds[0]);
  s.wake_write = detail::Socket(pipe_fds[1]);
  s.options = std::move(options);
  thread_ = std::thread([this] { state_->run(); });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

std::string TcpStoreServer::address() const { return detail::format_address(host_, port_); }

void TcpStoreServer::stop() {
  std::lock_guard lock(state_->stop_mu);
  if (!thread_.joinable()) return;
  state_->stopping = true;
  uint8_t byte = 1;
  while (::write(state_->wake_write.fd(), &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
}

void TcpStoreServer::State::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stopping) {
    fds.clear();
    ids.clear();
    fds.push_back({wake_read.fd(), POLLIN, 0});
    bool accepting = Clock::now() >= accept_paused_until;
    fds.push_back({accepting ? listener.fd() : -1, POLLIN, 0});  // poll ignores negative fds
    for (auto& [id, c] : clients) {
      // POLLRDHUP even while a client is parked (not reading): a rank that dies while waiting is
      // noticed at once and its waiter removed.
      short events = POLLRDHUP;
      if (!c.paused()) events |= POLLIN;
      if (c.pending_out()) events |= POLLOUT;
      fds.push_back({c.sock.fd(), events, 0});
      ids.push_back(id);
    }
    int rc = ::poll(fds.data(), fds.size(), poll_timeout());
    if (rc < 0) {
      if (errno == EINTR) continue;
      log(concat("poll failed: ", std::strerror(errno), "; closing every connection"));
      break;
    }
    if (fds[0].revents) {
      uint8_t drain[64];
      while (::read(wake_read.fd(), drain, sizeof(drain)) > 0) {
      }
    }
    if (stopping) break;
    if (accepting && fds[1].revents) accept_all();
    for (size_t i = 0; i < ids.size(); ++i) {
      short revents = fds[i + 2].revents;
      auto it = clients.find(ids[i]);
      if (revents && it != clients.end() && !it->second.dead) handle_events(it->second, revents);
    }
    expire_waiters();
    expire_hellos();
    // Unparked clients may have requests queued; running them can unpark others in turn.
    while (!runnable.empty()) {
      uint64_t id = runnable.back();
      runnable.pop_back();
      auto it = clients.find(id);
      if (it != clients.end() && !it->second.dead) process_frames(it->second);
    }
    sweep_dead();
  }
  // Closing every connection is what tells blocked clients the store is gone.
  waiters.clear();
  clients.clear();
  listener.close();
}

void TcpStoreServer::State::accept_all() {
  for (;;) {
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors: the listening socket stays readable, so pause accepting instead of
      // spinning; the pending connections wait in the backlog.
      log(concat("accept failed: ", std::strerror(errno), "; pausing new connections for ", kAcceptPause.count(),
                 " ms (raise `ulimit -n` for large jobs)"));
      accept_paused_until = Clock::now() + kAcceptPause;
      return;
    }
    detail::Socket sock(fd);
    std::string peer = detail::peer_address(fd);
    if (clients.size() >= options.max_connections) {
      log(concat("refused connection from ", peer, ": already ", clients.size(), " connections (max_connections)"));
      continue;
    }
    detail::set_nodelay(fd);
    uint64_t id = next_id++;
    Client& c = clients[id];
    c.id = id;
    c.sock = std::move(sock);
    c.peer = std::move(peer);
    c.hello_due = Clock::now() + options.hello_timeout;
  }
}

void TcpStoreServer::State::handle_events(Client& c, short revents) {
  if (revents & POLLOUT) flush(c);
  if (c.dead) return;
  if (revents & (POLLERR | POLLHUP)) {
    c.dead = true;  // reset or fully closed: nothing left to read or to answer
    return;
  }
  if (revents & (POLLIN | POLLRDHUP)) {
    if (c.paused()) {
      // Only POLLRDHUP was asked for: the client closed its side while waiting for a reply.
      if (revents & POLLRDHUP) c.dead = true;
      return;
    }
    read_some(c);
  } else if (!c.paused() && !c.in.empty()) {
    process_frames(c);  // its replies drained below the high-water mark: resume its requests
  }
}

void TcpStoreServer::State::read_some(Client& c) {
  for (int n = 0; n < kReadsPerRound && !c.dead && !c.paused(); ++n) {
    ssize_t k = ::recv(c.sock.fd(), read_buf.data(), read_buf.size(), 0);
    if (k > 0) {
      c.in.insert(c.in.end(), read_buf.data(), read_buf.data() + k);
      process_frames(c);
      continue;
    }
    if (k == 0) {
      if (!c.in.empty()) drop(c, concat("closed the connection in the middle of a frame (", c.in.size(),
                                        " bytes of a truncated message)"));
      c.dead = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;  // reset by the peer
    return;
  }
}

void TcpStoreServer::State::process_frames(Client& c) {
  size_t pos = 0;
  while (!c.dead && !c.paused()) {
    size_t avail = c.in.size() - pos;
    if (avail < detail::kFrameHeaderBytes) break;
    // The length is checked as soon as its 4 bytes arrive, before buffering any of the frame.
    uint32_t len = detail::read_u32_le(c.in.data() + pos);
    size_t limit = c.authenticated ? options.max_message_bytes : std::min(kHelloMaxBytes, options.max_message_bytes);
    if (len == 0 || len > limit) {
      drop(c, concat("malformed message: frame length ", len, " is ", len == 0 ? "zero" : "above the limit of ",
                     len == 0 ? "" : std::to_string(limit), len == 0 ? "" : " bytes",
                     c.authenticated ? "" : " for a hello"));
      return;
    }
    if (avail - detail::kFrameHeaderBytes < len) break;  // wait for the rest of the frame
    handle_frame(c, c.in.data() + pos + detail::kFrameHeaderBytes, len);
    pos += detail::kFrameHeaderBytes + len;
  }
  if (!c.dead) c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(pos));
}

void TcpStoreServer::State::handle_frame(Client& c, const uint8_t* data, size_t size) {
  try {
    FrameReader r(data, size);
    uint8_t opcode = r.u8();
    if (!c.authenticated) {
      if (opcode != uint8_t(StoreOp::kHello))
        throw ProtocolError(concat("first message has opcode ", int(opcode), ", expected a hello with the job token"));
      handle_hello(c, r);
      return;
    }
    switch (StoreOp(opcode)) {
      case StoreOp::kSet: {
        std::string key = r.str();
        Bytes value = r.bytes();
        r.expect_end();
        table.set(key, std::move(value));
        reply(c, FrameWriter(uint8_t(StoreReply::kOk)).finish());
        wake_waiters();
        return;
      }
      case StoreOp::kGet: {
        std::string key = r.str();
        int64_t timeout_ms = r.i64();
        r.expect_end();
        if (const Bytes* v = table.find(key))
          reply(c, FrameWriter(uint8_t(StoreReply::kValue)).bytes(*v).finish());
        else
          park(c, StoreOp::kGet, {key}, timeout_ms);
        return;
      }
      case StoreOp::kAdd: {
        std::string key = r.str();
        int64_t delta = r.i64();
        r.expect_end();
        int64_t value;
        try {
          value = table.add("TcpStore::add", key, delta);
        } catch (const ValueError& e) {
          reply(c, FrameWriter(uint8_t(StoreReply::kError)).str(e.what()).finish());
          return;
        }
        reply(c, FrameWriter(uint8_t(StoreReply::kInt)).i64(value).finish());
        wake_waiters();
        return;
      }
      case StoreOp::kCompareSet: {
        std::string key = r.str();
        Bytes expected = r.bytes();
        Bytes desired = r.bytes();
        r.expect_end();
        bool changed = false;
        Bytes after = table.compare_set(key, expected, desired, &changed);
        reply(c, FrameWriter(uint8_t(StoreReply::kValue)).bytes(after).finish());
        if (changed) wake_waiters();
        return;
      }
      case StoreOp::kDeleteKey: {
        std::string key = r.str();
        r.expect_end();
        reply(c, FrameWriter(uint8_t(StoreReply::kBool)).u8(table.erase(key)).finish());
        return;
      }
      case StoreOp::kCheck: {
        std::vector<std::string> keys = r.keys();
        r.expect_end();
        reply(c, FrameWriter(uint8_t(StoreReply::kBool)).u8(table.missing(keys).empty()).finish());
        return;
      }
      case StoreOp::kWait: {
        std::vector<std::string> keys = r.keys();
        int64_t timeout_ms = r.i64();
        r.expect_end();
        if (table.missing(keys).empty())
          reply(c, FrameWriter(uint8_t(StoreReply::kOk)).finish());
        else
          park(c, StoreOp::kWait, std::move(keys), timeout_ms);
        return;
      }
      case StoreOp::kHello:
        throw ProtocolError("a second hello on an authenticated connection");
    }
    throw ProtocolError(concat("unknown opcode ", int(opcode)));
  } catch (const ProtocolError& e) {
    drop(c, concat("malformed message: ", e.what()));
  }
}

void TcpStoreServer::State::handle_hello(Client& c, FrameReader& r) {
  uint32_t version = r.u32();
  int64_t rank = r.i64();
  std::string token = r.str();
  r.expect_end();
  c.rank = rank;
  auto reject = [&](detail::RejectReason reason, const std::string& why) {
    log(concat("rejected connection from ", who(c), ": ", why));
    reply(c, FrameWriter(uint8_t(StoreReply::kRejected)).u8(uint8_t(reason)).finish());
    c.closing = true;
    if (c.pending_out() == 0) c.dead = true;
  };
  if (version != detail::kStoreProtocolVersion)
    return reject(detail::RejectReason::kVersion,
                  concat("protocol version ", version, ", this server speaks ", detail::kStoreProtocolVersion));
  if (!detail::tokens_equal(token, options.token)) return reject(detail::RejectReason::kToken, "wrong job token");
  c.authenticated = true;
  reply(c, FrameWriter(uint8_t(StoreReply::kOk)).finish());
}

void TcpStoreServer::State::park(Client& c, StoreOp op, std::vector<std::string> keys, int64_t timeout_ms) {
  c.waiting = true;
  waiters.push_back({c.id, op, std::move(keys), detail::deadline_after(Milliseconds(std::max<int64_t>(timeout_ms, 0)))});
}

void TcpStoreServer::State::wake_waiters() {
  for (auto it = waiters.begin(); it != waiters.end();) {
    auto cit = clients.find(it->client);
    if (cit == clients.end() || cit->second.dead) {
      it = waiters.erase(it);
      continue;
    }
    if (!table.missing(it->keys).empty()) {
      ++it;
      continue;
    }
    Client& c = cit->second;
    c.waiting = false;
    if (it->op == StoreOp::kGet)
      reply(c, FrameWriter(uint8_t(StoreReply::kValue)).bytes(*table.find(it->keys[0])).finish());
    else
      reply(c, FrameWriter(uint8_t(StoreReply::kOk)).finish());
    runnable.push_back(c.id);
    it = waiters.erase(it);
  }
}

void TcpStoreServer::State::expire_waiters() {
  auto now = Clock::now();
  for (auto it = waiters.begin(); it != waiters.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    auto cit = clients.find(it->client);
    if (cit != clients.end() && !cit->second.dead) {
      Client& c = cit->second;
      c.waiting = false;
      reply(c, FrameWriter(uint8_t(StoreReply::kTimeout)).keys(table.missing(it->keys)).finish());
      runnable.push_back(c.id);
    }
    it = waiters.erase(it);
  }
}

void TcpStoreServer::State::expire_hellos() {
  const auto now = Clock::now();
  for (auto& [id, c] : clients)
    if (!c.authenticated && !c.dead && !c.closing && now >= c.hello_due)
      drop(c, concat("no hello within ", options.hello_timeout.count(), " ms"));
}

int TcpStoreServer::State::poll_timeout() const {
  bool any = false;
  Clock::time_point next{};
  for (const auto& [id, c] : clients) {
    if (c.authenticated || c.dead || c.closing) continue;
    if (!any || c.hello_due < next) next = c.hello_due;
    any = true;
  }
  for (const auto& w : waiters) {
    if (!any || w.deadline < next) next = w.deadline;
    any = true;
  }
  if (Clock::now() < accept_paused_until && (!any || accept_paused_until < next)) {
    next = accept_paused_until;
    any = true;
  }
  return any ? detail::poll_timeout_ms(next) : -1;
}

void TcpStoreServer::State::reply(Client& c, const Bytes& frame) {
  c.out.insert(c.out.end(), frame.begin(), frame.end());
  flush(c);
}

void TcpStoreServer::State::flush(Client& c) {
  while (c.pending_out() > 0) {
    ssize_t k = ::send(c.sock.fd(), c.out.data() + c.out_sent, c.pending_out(), MSG_NOSIGNAL);
    if (k > 0) {
      c.out_sent += static_cast<size_t>(k);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;  // the client is gone
    return;
  }
  c.out.clear();
  c.out_sent = 0;
  if (c.closing) c.dead = true;
}

void TcpStoreServer::State::drop(Client& c, const std::string& reason) {
  log(concat("dropped connection from ", who(c), ": ", reason));
  c.dead = true;
}

void TcpStoreServer::State::sweep_dead() {
  waiters.remove_if([&](const Waiter& w) {
    auto it = clients.find(w.client);
    return it == clients.end() || it->second.dead;
  });
  std::erase_if(clients, [](const auto& entry) { return entry.second.dead; });
}

}  // namespace tessera::dist
