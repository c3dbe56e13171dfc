#include "tessera/dist/net/framed_client.h"

#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/net/framed_server.h"

namespace tessera::dist::net {

using detail::Clock;
using tessera::detail::concat;

FramedClient::FramedClient(FramedClientOptions options)
    : options_(std::move(options)),
      description_(concat(options_.peer_name, " at ", detail::format_address(options_.host, options_.port))) {
  auto deadline = detail::deadline_after(options_.connect_timeout);
  std::string error;
  auto pause = Milliseconds(10);
  for (;;) {
    sock_ = detail::try_connect_tcp(options_.host, options_.port, deadline, &error);
    if (sock_.valid()) break;
    if (Clock::now() + pause >= deadline)
      throw TimeoutError(concat("could not connect to ", description_, " within ", options_.connect_timeout.count(),
                                " ms: ", error));
    std::this_thread::sleep_for(pause);  // a retry interval, not synchronisation: the server may not listen yet
    pause = std::min(pause * 2, Milliseconds(500));
  }
  detail::set_nodelay(sock_.fd());
  send(detail::FrameWriter(kHelloOpcode).u32(options_.protocol_version).i64(options_.rank).str(options_.token).finish(),
       deadline, "the hello");
  Bytes reply = receive(deadline, "the hello");
  if (reply[0] == kHelloRejected) {
    detail::FrameReader r(reply.data() + 1, reply.size() - 1);
    r.u8();  // the reason; the text says it
    throw PeerFailureError(concat(description_, " rejected this process (rank ", options_.rank, "): ", r.str()));
  }
  if (reply[0] != kHelloAccepted)
    throw PeerFailureError(concat(description_, " answered the hello with opcode ", int(reply[0]), "; is it a ",
                                  options_.peer_name, "?"));
}

void FramedClient::check(const detail::IoResult& result, const std::string& what, const char* direction) {
  switch (result.status) {
    case detail::IoStatus::kOk:
      return;
    case detail::IoStatus::kTimeout:
      throw TimeoutError(concat(description_, " did not ", direction, " ", what, " in time (rank ", options_.rank,
                                "); is it stalled or overloaded?"));
    case detail::IoStatus::kClosed:
      throw PeerFailureError(concat(description_, " closed the connection during ", what, " (rank ", options_.rank,
                                    "); did it fail? see its log"));
    case detail::IoStatus::kError:
      throw PeerFailureError(concat("connection to ", description_, " failed during ", what, ": ", result.error));
  }
}

void FramedClient::send(const Bytes& frame, Clock::time_point deadline, const std::string& what) {
  check(detail::send_all(sock_.fd(), frame.data(), frame.size(), deadline), what, "accept");
}

Bytes FramedClient::receive(Clock::time_point deadline, const std::string& what) {
  Bytes payload;
  receive(payload, deadline, what);
  return payload;
}

void FramedClient::receive(Bytes& payload, Clock::time_point deadline, const std::string& what) {
  uint8_t header[detail::kFrameHeaderBytes];
  check(detail::recv_exact(sock_.fd(), header, sizeof header, deadline), what, "answer");
  uint32_t len = detail::read_u32_le(header);
  if (len == 0 || len > options_.max_message_bytes)
    throw PeerFailureError(concat(description_, " sent a reply to ", what, " of ", len,
                                  " bytes, outside (0, ", options_.max_message_bytes, "]: corrupt stream"));
  payload.resize(len);
  check(detail::recv_exact(sock_.fd(), payload.data(), len, deadline), what, "answer");
}

}  // namespace tessera::dist::net
