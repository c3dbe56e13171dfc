// Helpers shared by the store tests: a captured server log, option builders for a loopback server
// and its clients, and a raw socket for sending hand-made frames.
#pragma once
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/dist/net/socket.h"
#include "tessera/dist/store/tcp_store.h"
#include "tessera/dist/store/tcp_store_protocol.h"
#include "tessera/dist/store/tcp_store_server.h"

namespace tessera::dist::testing {

inline constexpr const char* kToken = "test-job-token-0123456789abcdef";

// The server logs on its own thread; tests read the lines after the event that follows the log
// line (a connection closed), so the mutex is all the ordering they need.
class LogCapture {
 public:
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mu_);
      lines_.push_back(line);
    };
  }
  std::string joined() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& l : lines_) out += l + "\n";
    return out;
  }
  bool contains(const std::string& fragment) { return joined().find(fragment) != std::string::npos; }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

inline TcpStoreServerOptions server_options(LogCapture& log) {
  TcpStoreServerOptions o;
  o.token = kToken;
  o.log = log.sink();
  return o;
}

inline TcpStoreOptions client_options(const TcpStoreServer& server, int rank = 0) {
  TcpStoreOptions o;
  o.port = server.port();
  o.token = kToken;
  o.rank = rank;
  o.timeout = std::chrono::seconds(10);
  o.connect_timeout = std::chrono::seconds(10);
  return o;
}

// A plain blocking connection that speaks whatever bytes the test hands it.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) {
    std::string error;
    sock_ = detail::try_connect_tcp("127.0.0.1", port, detail::deadline_after(std::chrono::seconds(5)), &error);
    EXPECT_TRUE(sock_.valid()) << error;
  }
  void send(const Bytes& bytes) {
    auto r = detail::send_all(sock_.fd(), bytes.data(), bytes.size(), detail::deadline_after(std::chrono::seconds(5)));
    EXPECT_EQ(r.status, detail::IoStatus::kOk) << r.error;
  }
  void send_hello(const std::string& token = kToken) {
    send(detail::FrameWriter(uint8_t(detail::StoreOp::kHello))
             .u32(detail::kStoreProtocolVersion)
             .i64(99)
             .str(token)
             .finish());
  }
  // Reads one reply frame; returns its opcode (0 when the connection closed first).
  uint8_t read_reply_opcode() {
    uint8_t header[4];
    auto deadline = detail::deadline_after(std::chrono::seconds(5));
    if (detail::recv_exact(sock_.fd(), header, 4, deadline).status != detail::IoStatus::kOk) return 0;
    Bytes payload(detail::read_u32_le(header));
    if (payload.empty() ||
        detail::recv_exact(sock_.fd(), payload.data(), payload.size(), deadline).status != detail::IoStatus::kOk)
      return 0;
    return payload[0];
  }
  // True once the server has closed the connection (EOF or reset), reading and discarding any
  // replies on the way; false if it stays open for `within`.
  bool closed_by_server(std::chrono::milliseconds within = std::chrono::seconds(5)) {
    auto deadline = detail::deadline_after(within);
    uint8_t buf[256];
    for (;;) {
      pollfd p{sock_.fd(), POLLIN, 0};
      if (::poll(&p, 1, detail::poll_timeout_ms(deadline)) <= 0) return false;
      ssize_t k = ::recv(sock_.fd(), buf, sizeof(buf), MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno == ECONNRESET)) return true;
    }
  }
  void shutdown_write() { ::shutdown(sock_.fd(), SHUT_WR); }
  int fd() const { return sock_.fd(); }

 private:
  detail::Socket sock_;
};

inline Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

}  // namespace tessera::dist::testing
