// A port for a test's server that other processes will be told to reach before it listens (a
// rendezvous endpoint, etcd's URLs). pick_free_port() binds port 0, which hands out ports from the
// kernel's ephemeral range, and any outgoing connection on the machine (another test's clients, in
// a parallel ctest run) may take the same port as its source before the server binds it: the
// server's bind then fails and its clients are refused until they time out. That failed a CI run
// (ElasticRun.AnAgentAddedMidRunGrowsTheJob: no agent could host 127.0.0.1:36611). Ports below the
// ephemeral range are never given to outgoing connections, so only a listener can hold one.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

namespace tessera::testing {

// Binds `fd` to 127.0.0.1:port; false (errno set) if it cannot.
inline bool bind_loopback(int fd, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

// A random port in [10000, the ephemeral range's start) that 127.0.0.1 can listen on now (it is
// closed again before this returns). 200 tries at most.
inline int free_listen_port() {
  int ephemeral_start = 32768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> ephemeral_start;
  const int low = 10000, high = ephemeral_start - 1;
  if (high <= low) throw std::runtime_error("the ephemeral port range starts at " + std::to_string(ephemeral_start) +
                                            ", leaving no ports below it for a test's server");
  std::mt19937 gen(std::random_device{}());
  std::uniform_int_distribution<int> pick(low, high);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(gen);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    const bool ok = bind_loopback(fd, port) && ::listen(fd, 1) == 0;
    ::close(fd);
    if (ok) return port;
  }
  throw std::runtime_error("no free port below the ephemeral range on 127.0.0.1 after 200 tries");
}

}  // namespace tessera::testing
