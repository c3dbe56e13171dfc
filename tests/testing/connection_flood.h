// A flood of silent TCP connections against a server on loopback, and a bounded wait for the server
// to close the ones it refuses (tests of max_connections on the framed server and the store server).
#pragma once
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/dist/net/deadline.h"
#include "tessera/dist/net/socket.h"

namespace tessera::testing {

// `n` connections to 127.0.0.1:port that never say anything; invalid sockets where a connect failed.
inline std::vector<dist::detail::Socket> open_silent_connections(uint16_t port, int n) {
  std::vector<dist::detail::Socket> socks;
  socks.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    std::string error;
    socks.push_back(dist::detail::try_connect_tcp("127.0.0.1", port,
                                                  dist::detail::deadline_after(std::chrono::milliseconds(5000)), &error));
  }
  return socks;
}

// Waits until `want` of `socks` have been closed by the server (EOF or reset; a failed connect
// counts as closed) or `deadline` passes; returns how many were closed by then. Bytes the server
// sends first are read and dropped.
inline size_t wait_until_closed(const std::vector<dist::detail::Socket>& socks, size_t want,
                                dist::detail::Clock::time_point deadline) {
  std::vector<bool> closed(socks.size(), false);
  size_t count = 0;
  for (size_t i = 0; i < socks.size(); ++i)
    if (!socks[i].valid()) closed[i] = true, ++count;
  while (count < want) {
    std::vector<pollfd> fds;
    std::vector<size_t> index;
    for (size_t i = 0; i < socks.size(); ++i)
      if (!closed[i]) fds.push_back({socks[i].fd(), POLLIN, 0}), index.push_back(i);
    const int ready = ::poll(fds.data(), fds.size(), dist::detail::poll_timeout_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;  // the deadline passed (or poll failed)
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      char buf[256];
      const ssize_t got = ::recv(fds[k].fd, buf, sizeof buf, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        closed[index[k]] = true, ++count;
    }
  }
  return count;
}

}  // namespace tessera::testing
