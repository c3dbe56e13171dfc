#include "tessera/dist/net/framed_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/net/socket.h"
#include "tessera/dist/net/token_check.h"

namespace tessera::dist::net {

namespace {

constexpr auto kAcceptPause = std::chrono::milliseconds(100);

using detail::FrameReader;
using detail::FrameWriter;
using detail::ProtocolError;
using tessera::detail::concat;

constexpr size_t kHelloMaxBytes = 64 * 1024;
constexpr size_t kReadChunk = 256 * 1024;
constexpr size_t kSmallRead = 4 * 1024;
constexpr int kReadsPerRound = 16;  // per connection and poll round: one sender cannot starve the rest
// A connection's requests wait, unread, while this much of its replies is unsent: a peer that does
// not read its replies cannot make the server buffer without bound.
constexpr size_t kOutHighWater = size_t(4) << 20;

}  // namespace

// Named, not anonymous: State holds Connections, and in a unity build this file is included into
// another, where GCC takes a member of internal-linkage type for a mistake (-Wsubobject-linkage).
namespace framed_server_state {

// Received, not yet parsed bytes, read into directly: growing it leaves the new bytes uninitialised
// (recv() writes them at once), where a std::vector would zero 256 KiB before every read, and its
// memory is kept from frame to frame.
class InBuffer {
 public:
  uint8_t* data() { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Room for `n` more bytes after size(); returns where they go (commit() counts them in).
  uint8_t* reserve_tail(size_t n) {
    if (capacity_ - size_ < n) {
      const size_t grown = std::max(size_ + n, 2 * capacity_);
      std::unique_ptr<uint8_t[]> bigger(new uint8_t[grown]);
      if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
      data_ = std::move(bigger);
      capacity_ = grown;
    }
    return data_.get() + size_;
  }
  void commit(size_t n) { size_ += n; }
  void drop_front(size_t n) {
    if (n < size_) std::memmove(data_.get(), data_.get() + n, size_ - n);
    size_ -= std::min(n, size_);
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0, capacity_ = 0;
};

struct Connection {
  detail::Socket sock;
  std::string address;
  int64_t rank = -1;
  bool authenticated = false;
  bool held = false;
  bool closing = false;  // rejected: closed once the rejection is written
  bool dead = false;
  std::string why;       // why it died, for on_disconnect
  InBuffer in;  // received, not yet parsed; read into directly
  Bytes out;
  size_t out_sent = 0;
  Clock::time_point hello_due{};  // unauthenticated: closed if no hello by then
  size_t pending_out() const { return out.size() - out_sent; }
  bool reading() const { return !held && !closing && !dead && pending_out() <= kOutHighWater; }
};

}  // namespace framed_server_state

using framed_server_state::Connection;

struct FramedServer::State {
  FramedServerOptions options;
  std::string address;
  uint16_t port = 0;
  detail::Socket listener, wake_read, wake_write;
  std::atomic<bool> stopping{false};
  std::map<ConnectionId, Connection> connections;
  ConnectionId next_id = 1;
  Handler* handler = nullptr;
  // After accept() fails for want of descriptors the listener stays readable: accepting pauses
  // until then instead of spinning (the pending connections wait in the backlog).
  Clock::time_point accept_paused_until{};

  void log(const std::string& line) const { options.log(concat("[", options.name, " ", address, "] ", line)); }
  void accept_all();
  void on_events(ConnectionId id, Connection& c, short revents);
  void read_some(ConnectionId id, Connection& c);
  void parse(ConnectionId id, Connection& c);
  void hello(ConnectionId id, Connection& c, FrameReader& r);
  void flush(Connection& c);
  void kill(Connection& c, const std::string& why) {
    if (!c.dead) c.why = why;
    c.dead = true;
  }
  void sweep();
  // Frames already buffered on connections that may read again (released, or drained below the
  // high-water mark) go to the handler.
  void hand_over_buffered() {
    for (auto& [id, c] : connections)
      if (c.reading() && !c.in.empty()) parse(id, c);
  }
  std::string who(const Connection& c) const { return c.rank >= 0 ? concat(c.address, " (rank ", c.rank, ")") : c.address; }
};

FramedServer::FramedServer(FramedServerOptions options) : state_(std::make_unique<State>()) {
  TESSERA_CHECK(!options.token.empty(), "[", options.name, "] the job token is empty; pass TESSERA_JOB_TOKEN");
  if (!options.log) options.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  State& s = *state_;
  s.listener = detail::listen_tcp(options.host, options.port, options.backlog);
  s.port = detail::local_port(s.listener.fd());
  s.address = detail::format_address(options.host, s.port);
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
    throw IoError(concat("[", options.name, "] pipe2 failed: ", std::strerror(errno)));
  s.wake_read = detail::Socket(fds[0]);
  s.wake_write = detail::Socket(fds[1]);
  s.options = std::move(options);
}

FramedServer::~FramedServer() = default;

uint16_t FramedServer::port() const { return state_->port; }
std::string FramedServer::address() const { return state_->address; }

void FramedServer::stop() {
  state_->stopping = true;
  uint8_t byte = 1;
  while (::write(state_->wake_write.fd(), &byte, 1) < 0 && errno == EINTR) {
  }
}

void FramedServer::run(Handler& handler) {
  State& s = *state_;
  s.handler = &handler;
  std::vector<pollfd> fds;
  std::vector<ConnectionId> ids;
  while (!s.stopping) {
    fds.clear();
    ids.clear();
    fds.push_back({s.wake_read.fd(), POLLIN, 0});
    const bool accepting = Clock::now() >= s.accept_paused_until;
    fds.push_back({accepting ? s.listener.fd() : -1, POLLIN, 0});  // poll ignores negative fds
    for (auto& [id, c] : s.connections) {
      // POLLRDHUP also while held: a peer that dies while waiting for its reply is noticed at once.
      short events = POLLRDHUP;
      if (c.reading()) events |= POLLIN;
      if (c.pending_out()) events |= POLLOUT;
      fds.push_back({c.sock.fd(), events, 0});
      ids.push_back(id);
    }
    Clock::time_point deadline = handler.next_deadline();
    if (!accepting) deadline = std::min(deadline, s.accept_paused_until);
    for (const auto& [id, c] : s.connections)
      if (!c.authenticated && !c.dead) deadline = std::min(deadline, c.hello_due);
    int timeout = deadline == Clock::time_point::max() ? -1 : detail::poll_timeout_ms(deadline);
    int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc < 0 && errno != EINTR) throw IoError(concat("[", s.options.name, "] poll failed: ", std::strerror(errno)));
    if (rc > 0) {
      if (fds[0].revents) {
        uint8_t drain[64];
        while (::read(s.wake_read.fd(), drain, sizeof drain) > 0) {
        }
      }
      if (accepting && fds[1].revents) s.accept_all();
      for (size_t i = 0; i < ids.size(); ++i) {
        auto it = s.connections.find(ids[i]);
        if (fds[i + 2].revents && it != s.connections.end() && !it->second.dead)
          s.on_events(ids[i], it->second, fds[i + 2].revents);
      }
    }
    const Clock::time_point now = Clock::now();
    for (auto& [id, c] : s.connections)
      if (!c.authenticated && !c.dead && !c.closing && now >= c.hello_due) {
        s.log(concat("closed ", c.address, ": no hello within ", s.options.hello_timeout.count(), " ms"));
        s.kill(c, "no hello in time");
      }
    // A release() during this round may have left whole frames buffered: hand them over now.
    s.hand_over_buffered();
    s.sweep();
    if (!s.stopping) handler.on_tick();
    s.hand_over_buffered();  // on_tick() may have released some too
    s.sweep();
  }
  s.connections.clear();
  s.handler = nullptr;
}

void FramedServer::State::accept_all() {
  for (;;) {
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        log(concat("accept failed: ", std::strerror(errno), "; pausing new connections for ", kAcceptPause.count(),
                   " ms (raise `ulimit -n` for large jobs)"));
        accept_paused_until = Clock::now() + kAcceptPause;
      }
      return;
    }
    if (connections.size() >= options.max_connections) {
      log(concat("refused connection from ", detail::peer_address(fd), ": already ", connections.size(),
                 " connections (max_connections)"));
      detail::Socket refused(fd);  // closed here
      continue;
    }
    detail::set_nodelay(fd);
    Connection& c = connections[next_id++];
    c.sock = detail::Socket(fd);
    c.address = detail::peer_address(fd);
    c.hello_due = Clock::now() + options.hello_timeout;
  }
}

void FramedServer::State::on_events(ConnectionId id, Connection& c, short revents) {
  if (revents & POLLOUT) flush(c);
  if (c.dead) return;
  if (revents & (POLLERR | POLLHUP)) return kill(c, "the connection was reset");
  if (revents & (POLLIN | POLLRDHUP)) {
    if (!c.reading()) {
      if (revents & POLLRDHUP) kill(c, "closed the connection while waiting for a reply");
      return;
    }
    read_some(id, c);
  }
}

void FramedServer::State::read_some(ConnectionId id, Connection& c) {
  for (int n = 0; n < kReadsPerRound && c.reading(); ++n) {
    // A read as large as the rest of the frame under way (up to kReadChunk), else a small one: a
    // connection's buffer grows with what its peer sends, not by kReadChunk per connection.
    size_t want = kSmallRead;
    if (c.in.size() >= detail::kFrameHeaderBytes) {
      const size_t frame = detail::kFrameHeaderBytes + detail::read_u32_le(c.in.data());
      const size_t limit = c.authenticated ? options.max_message_bytes : std::min(kHelloMaxBytes, options.max_message_bytes);
      if (frame > c.in.size() && frame - detail::kFrameHeaderBytes <= limit)
        want = std::clamp(frame - c.in.size(), kSmallRead, kReadChunk);
    }
    ssize_t k = ::recv(c.sock.fd(), c.in.reserve_tail(want), want, 0);
    if (k > 0) {
      c.in.commit(static_cast<size_t>(k));
      parse(id, c);
      continue;
    }
    if (k == 0) {
      if (c.in.empty()) return kill(c, "closed the connection");
      const std::string why = concat("closed the connection in the middle of a frame (", c.in.size(), " bytes of a truncated message)");
      log(concat("dropped ", who(c), ": ", why));
      return kill(c, why);
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) kill(c, concat("connection error: ", std::strerror(errno)));
    return;
  }
}

void FramedServer::State::parse(ConnectionId id, Connection& c) {
  size_t pos = 0;
  while (c.reading()) {
    size_t avail = c.in.size() - pos;
    if (avail < detail::kFrameHeaderBytes) break;
    uint32_t len = detail::read_u32_le(c.in.data() + pos);
    size_t limit = c.authenticated ? options.max_message_bytes : std::min(kHelloMaxBytes, options.max_message_bytes);
    if (len == 0 || len > limit) {
      log(concat("dropped ", who(c), ": malformed message: frame length ", len,
                 len == 0 ? std::string(" is zero") : concat(" is above the limit of ", limit, " bytes", c.authenticated ? "" : " for a hello")));
      return kill(c, concat("sent a malformed frame (length ", len, ")"));
    }
    if (avail - detail::kFrameHeaderBytes < len) break;
    const uint8_t* frame = c.in.data() + pos + detail::kFrameHeaderBytes;
    pos += detail::kFrameHeaderBytes + len;
    try {
      FrameReader r(frame, len);
      uint8_t opcode = r.u8();
      if (!c.authenticated) {
        if (opcode != kHelloOpcode)
          throw ProtocolError(concat("first message has opcode ", int(opcode), ", expected a hello with the job token"));
        hello(id, c, r);
      } else {
        handler->on_frame(id, opcode, r);
      }
    } catch (const ProtocolError& e) {
      log(concat("dropped ", who(c), ": malformed message: ", e.what()));
      kill(c, concat("sent a malformed message: ", e.what()));
    }
  }
  if (!c.dead) c.in.drop_front(pos);
}

void FramedServer::State::hello(ConnectionId id, Connection& c, FrameReader& r) {
  uint32_t version = r.u32();
  int64_t rank = r.i64();
  std::string token = r.str();
  r.expect_end();
  c.rank = rank;
  std::string why;
  uint8_t reason = 0;
  if (version != options.protocol_version)
    why = concat("protocol version ", version, ", expected ", options.protocol_version), reason = kRejectedVersion;
  else if (!detail::tokens_equal(token, options.token))
    why = "wrong job token", reason = kRejectedToken;
  if (!why.empty()) {
    log(concat("rejected ", c.address, " (rank ", rank, "): ", why));
    c.out = FrameWriter(kHelloRejected).u8(reason).str(why).finish();
    c.closing = true;
    flush(c);
    return;
  }
  c.authenticated = true;
  c.out = FrameWriter(kHelloAccepted).finish();
  flush(c);
  handler->on_connect(id, rank);
}

void FramedServer::State::flush(Connection& c) {
  while (c.pending_out() > 0) {
    ssize_t k = ::send(c.sock.fd(), c.out.data() + c.out_sent, c.pending_out(), MSG_NOSIGNAL);
    if (k > 0) {
      c.out_sent += static_cast<size_t>(k);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) kill(c, concat("connection error while sending: ", std::strerror(errno)));
    return;
  }
  c.out.clear();
  c.out_sent = 0;
  if (c.closing) c.dead = true;
}

void FramedServer::State::sweep() {
  for (auto it = connections.begin(); it != connections.end();) {
    if (!it->second.dead) {
      ++it;
      continue;
    }
    bool tell = it->second.authenticated && !it->second.closing;
    std::string why = it->second.why;
    ConnectionId id = it->first;
    it = connections.erase(it);
    if (tell && handler) handler->on_disconnect(id, why);
  }
}

void FramedServer::send(ConnectionId id, const Bytes& frame) {
  auto it = state_->connections.find(id);
  if (it == state_->connections.end() || it->second.dead) return;  // gone: its on_disconnect comes
  Connection& c = it->second;
  if (c.out_sent > 0 && c.out_sent == c.out.size()) c.out.clear(), c.out_sent = 0;
  c.out.insert(c.out.end(), frame.begin(), frame.end());
  state_->flush(c);
}

void FramedServer::send_taking(ConnectionId id, Bytes& frame) {
  auto it = state_->connections.find(id);
  if (it == state_->connections.end() || it->second.dead) return;
  Connection& c = it->second;
  if (c.pending_out() > 0) return send(id, frame);  // behind another reply: copied after it
  c.out.clear();
  c.out_sent = 0;
  std::swap(c.out, frame);
  state_->flush(c);
}

void FramedServer::hold(ConnectionId id) {
  auto it = state_->connections.find(id);
  if (it != state_->connections.end()) it->second.held = true;
}

void FramedServer::release(ConnectionId id) {
  auto it = state_->connections.find(id);
  if (it != state_->connections.end()) it->second.held = false;
}

void FramedServer::close(ConnectionId id, const std::string& why) {
  auto it = state_->connections.find(id);
  if (it == state_->connections.end()) return;
  state_->log(concat("closed ", peer(id), ": ", why));
  it->second.authenticated = false;  // closed on purpose: no on_disconnect
  it->second.dead = true;
}

std::string FramedServer::peer(ConnectionId id) const {
  auto it = state_->connections.find(id);
  if (it == state_->connections.end()) return concat("connection ", id);
  return it->second.rank >= 0 ? concat(it->second.address, " (rank ", it->second.rank, ")") : it->second.address;
}

}  // namespace tessera::dist::net
