// Thin POSIX TCP helpers for the store: an owning fd, listen, connect with a deadline, and
// deadline-bounded send/recv on non-blocking sockets. Every socket is close-on-exec, so processes
// the launcher spawns never inherit the store's listening socket or its connections.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/dist/net/deadline.h"

namespace tessera::dist::detail {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  int release();

 private:
  int fd_ = -1;
};

// "host:port", with brackets around IPv6 literals.
std::string format_address(const std::string& host, uint16_t port);
// The remote end of a connected socket, e.g. "127.0.0.1:54321" (for the server's logs).
std::string peer_address(int fd);
uint16_t local_port(int fd);

// A non-blocking listening socket with SO_REUSEADDR (a restarted launcher can reuse its port while
// old connections sit in TIME_WAIT). IoError naming host:port when it cannot bind.
Socket listen_tcp(const std::string& host, uint16_t port, int backlog);

// One attempt to connect to any address of host:port before `deadline`. On failure returns an
// invalid Socket and a reason in `error` (the caller decides whether to retry).
Socket try_connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline, std::string* error);

void set_nodelay(int fd);

enum class IoStatus { kOk, kTimeout, kClosed, kError };
struct IoResult {
  IoStatus status = IoStatus::kOk;
  std::string error;  // strerror text for kError
};
// Send or receive exactly `n` bytes on a non-blocking socket, waiting with poll() until `deadline`.
// kClosed means the peer closed (EOF, reset, broken pipe): for the store client, a dead server.
IoResult send_all(int fd, const uint8_t* data, size_t n, Clock::time_point deadline);
IoResult recv_exact(int fd, uint8_t* data, size_t n, Clock::time_point deadline);

}  // namespace tessera::dist::detail
