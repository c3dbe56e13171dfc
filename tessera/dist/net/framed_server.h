// FramedServer: a single-threaded poll() server for length-framed request/reply protocols, the
// transport under the rendezvous store's server (store/tcp_store_server.h) and the parameter servers
// (tessera/parallel/ps). Messages are frames (net/frame.h): u32 length | u8 opcode | fields, and
// every connection first presents a protocol version, its rank and the job token.
//
// What it does so that a protocol does not have to: accept, buffer partial frames, bound every
// frame by max_message_bytes (a hello by 64 KiB, before the token is checked), reject a wrong token
// or version, queue replies without blocking on a slow reader (and stop reading a peer's requests
// while 4 MiB of its replies are unsent), and report a peer that disconnects
// (a killed process: its kernel closes the socket) with the reason. The handler sees whole frames,
// in order, one connection at a time.
//
// A handler that cannot answer a request yet (a pull waiting for the other workers) calls hold():
// the connection's later frames wait, unread, until release(), so replies stay in request order.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tessera/dist/net/deadline.h"
#include "tessera/dist/net/frame.h"

namespace tessera::dist::net {

using Clock = std::chrono::steady_clock;
using ConnectionId = uint64_t;

// The hello and its answers (the same numbers as the store's, so one client handshake serves both).
constexpr uint8_t kHelloOpcode = 1;
constexpr uint8_t kHelloAccepted = 0x80;
constexpr uint8_t kHelloRejected = 0x86;  // then u8 reason, str why
constexpr uint8_t kRejectedToken = 1;     // the reasons: the store's RejectReason
constexpr uint8_t kRejectedVersion = 2;

struct FramedServerOptions {
  std::string name = "server";      // in log lines and errors, e.g. "ps server 1"
  std::string host = "127.0.0.1";   // loopback unless told otherwise
  uint16_t port = 0;                // 0: a free port (port() tells which)
  int backlog = 1024;               // a job's ranks all connect at once
  std::string token;                // required
  uint32_t protocol_version = 1;
  size_t max_message_bytes = size_t(256) << 20;
  size_t max_connections = 4096;  // more are closed at once (logged): a flood cannot exhaust descriptors
  // A connection that has not presented its hello by then is closed (logged): silent connections
  // cannot hold the slots honest clients need.
  std::chrono::milliseconds hello_timeout{10000};
  std::function<void(const std::string&)> log;  // default: a line on stderr
};

class FramedServer {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // A peer presented the right token and version; `rank` is what it said it is.
    virtual void on_connect(ConnectionId id, int64_t rank) = 0;
    // One request. Throw detail::ProtocolError for a malformed one: the connection is dropped with
    // the reason logged, and on_disconnect follows.
    virtual void on_frame(ConnectionId id, uint8_t opcode, detail::FrameReader& fields) = 0;
    // An authenticated peer is gone: closed, reset, or dropped for a malformed frame.
    virtual void on_disconnect(ConnectionId id, const std::string& why) = 0;
    // The loop wakes at least by then to call on_tick() (timeouts of the protocol).
    virtual Clock::time_point next_deadline() { return Clock::time_point::max(); }
    virtual void on_tick() {}
  };

  // Binds and listens; IoError naming host:port when it cannot, ValueError without a token.
  explicit FramedServer(FramedServerOptions options);
  ~FramedServer();
  FramedServer(const FramedServer&) = delete;
  FramedServer& operator=(const FramedServer&) = delete;

  uint16_t port() const;
  std::string address() const;  // "host:port"

  // Serves on the calling thread until stop(); then closes every connection.
  void run(Handler& handler);
  // From any thread, or from the handler: run() returns after the current round.
  void stop();

  // For the handler (on run()'s thread only):
  void send(ConnectionId id, const Bytes& frame);  // queued; written as the peer reads
  // The same, taking the frame's memory instead of copying it when nothing else is queued; `frame`
  // is left with memory to reuse for the next one (its contents unspecified).
  void send_taking(ConnectionId id, Bytes& frame);
  void hold(ConnectionId id);
  void release(ConnectionId id);
  void close(ConnectionId id, const std::string& why);  // logged; no on_disconnect
  std::string peer(ConnectionId id) const;               // "host:port (rank R)"

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tessera::dist::net
