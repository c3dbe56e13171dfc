#include "tessera/dist/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::dist::detail {

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string format_address(const std::string& host, uint16_t port) {
  bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string peer_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "unknown peer";
  return format_address(host, static_cast<uint16_t>(std::atoi(serv)));
}

uint16_t local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  TESSERA_ASSERT(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0, std::strerror(errno));
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

namespace {

struct AddrInfoList {
  addrinfo* head = nullptr;
  ~AddrInfoList() {
    if (head) ::freeaddrinfo(head);
  }
};

// getaddrinfo for host:port; returns the gai error code (0 on success).
int resolve(const std::string& host, uint16_t port, bool passive, AddrInfoList* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string service = std::to_string(port);
  return ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out->head);
}

}  // namespace

Socket listen_tcp(const std::string& host, uint16_t port, int backlog) {
  std::string where = format_address(host, port);
  AddrInfoList addrs;
  if (int rc = resolve(host, port, /*passive=*/true, &addrs); rc != 0)
    throw IoError(tessera::detail::concat("[TcpStoreServer] cannot resolve ", where, ": ", ::gai_strerror(rc)));
  std::string last_error = "no address";
  for (addrinfo* ai = addrs.head; ai; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(s.fd(), backlog) == 0) return s;
    last_error = std::strerror(errno);
  }
  throw IoError(tessera::detail::concat("[TcpStoreServer] cannot listen on ", where, ": ", last_error,
                       (port ? " (pass port 0 to pick a free port, or free this one)" : "")));
}

Socket try_connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline, std::string* error) {
  AddrInfoList addrs;
  if (int rc = resolve(host, port, /*passive=*/false, &addrs); rc != 0) {
    *error = tessera::detail::concat("cannot resolve host: ", ::gai_strerror(rc));
    return Socket();
  }
  *error = "no address";
  for (addrinfo* ai = addrs.head; ai; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      *error = std::strerror(errno);
      continue;
    }
    if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) == 0) return s;
    if (errno != EINPROGRESS) {
      *error = std::strerror(errno);
      continue;
    }
    // Non-blocking connect: wait for writability, then read the outcome from SO_ERROR.
    pollfd p{s.fd(), POLLOUT, 0};
    int rc;
    do {
      rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) {
      *error = "connect timed out";
      continue;
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (rc > 0 && so_error == 0) return s;
    *error = std::strerror(so_error ? so_error : errno);
  }
  return Socket();
}

void set_nodelay(int fd) {
  // Store messages are small request/reply pairs: Nagle's delay would add up to 40 ms to each.
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

namespace {

// Waits until fd is ready for `events` or the deadline passes.
IoResult wait_ready(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    int rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (rc > 0) return {};
    if (rc == 0) return {IoStatus::kTimeout, ""};
    if (errno != EINTR) return {IoStatus::kError, std::strerror(errno)};
  }
}

bool is_closed_errno(int e) { return e == ECONNRESET || e == EPIPE || e == ENOTCONN || e == ECONNABORTED; }

}  // namespace

IoResult send_all(int fd, const uint8_t* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);  // a dead peer must not SIGPIPE the process
    if (k > 0) {
      data += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (IoResult r = wait_ready(fd, POLLOUT, deadline); r.status != IoStatus::kOk) return r;
      continue;
    }
    return {is_closed_errno(errno) ? IoStatus::kClosed : IoStatus::kError, std::strerror(errno)};
  }
  return {};
}

IoResult recv_exact(int fd, uint8_t* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t k = ::recv(fd, data, n, 0);
    if (k > 0) {
      data += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return {IoStatus::kClosed, "connection closed"};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (IoResult r = wait_ready(fd, POLLIN, deadline); r.status != IoStatus::kOk) return r;
      continue;
    }
    return {is_closed_errno(errno) ? IoStatus::kClosed : IoStatus::kError, std::strerror(errno)};
  }
  return {};
}

}  // namespace tessera::dist::detail
