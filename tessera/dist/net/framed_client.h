// FramedClient: one blocking request/reply connection to a FramedServer (framed_server.h). Every
// call has a deadline, and every error names the operation and the peer ("ps server 1 at
// 127.0.0.1:4567"), so a dead or stalled server is reported, not waited for.
#pragma once
#include <cstdint>
#include <string>

#include "tessera/dist/net/deadline.h"
#include "tessera/dist/net/socket.h"
#include "tessera/dist/net/frame.h"

namespace tessera::dist::net {

struct FramedClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string peer_name = "server";  // in errors: "<peer_name> at host:port"
  std::string token;
  uint32_t protocol_version = 1;
  int64_t rank = -1;                  // who we are, for the server's logs
  Milliseconds connect_timeout{60000};  // retried until then: the server may start after us
  size_t max_message_bytes = size_t(256) << 20;  // a longer reply is treated as corrupt
};

class FramedClient {
 public:
  // Connects and presents the token. TimeoutError when nothing answers in time; PeerFailureError
  // when the server rejects us (the reason it gave is in the message).
  explicit FramedClient(FramedClientOptions options);

  // `what` names the request in errors, e.g. "pull of step 12". TimeoutError past the deadline,
  // PeerFailureError when the server closed the connection.
  void send(const Bytes& frame, detail::Clock::time_point deadline, const std::string& what);
  // One frame's payload: opcode byte, then fields.
  Bytes receive(detail::Clock::time_point deadline, const std::string& what);
  // The same into `payload`, whose memory is reused (a reply of megabytes every step allocates
  // nothing once the first one has).
  void receive(Bytes& payload, detail::Clock::time_point deadline, const std::string& what);

  const std::string& description() const { return description_; }  // "ps server 1 at host:port"

 private:
  void check(const detail::IoResult& result, const std::string& what, const char* direction);
  FramedClientOptions options_;
  std::string description_;
  detail::Socket sock_;
};

}  // namespace tessera::dist::net
