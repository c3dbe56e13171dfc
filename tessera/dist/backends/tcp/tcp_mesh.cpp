#include "tessera/dist/backends/tcp/tcp_mesh.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/job_token.h"
#include "tessera/dist/net/interface.h"
#include "tessera/util/settings.h"

namespace tessera::dist::detail {

using tessera::detail::concat;

namespace {

constexpr size_t kMaxKeyBytes = 64;
// A connection that has not sent its hello by then is closed: a silent stray connection costs the
// rendezvous at most this long, not the whole timeout.
constexpr Milliseconds kHelloTimeout{5000};

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

std::pair<std::string, uint16_t> split_address(const std::string& address) {
  const size_t colon = address.rfind(':');
  TESSERA_CHECK(colon != std::string::npos && colon + 1 < address.size(), "[tcp rendezvous] malformed address '", address,
                "' in the store");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, static_cast<uint16_t>(std::stoi(address.substr(colon + 1)))};
}

// Connects to `rank` (below ours) and presents the hello; retried until the deadline, since the
// peer may not listen yet.
Socket connect_to(int rank, int peer, int size, const std::string& key, const std::string& address,
                  Clock::time_point deadline) {
  auto [host, port] = split_address(address);
  Bytes hello;
  put_u32(hello, kTcpMeshMagic);
  put_u32(hello, static_cast<uint32_t>(rank));
  put_u32(hello, static_cast<uint32_t>(size));
  put_u32(hello, static_cast<uint32_t>(key.size()));
  hello.insert(hello.end(), key.begin(), key.end());
  std::string last = "no attempt";
  for (int attempt = 0; Clock::now() < deadline; ++attempt) {
    Socket s = try_connect_tcp(host, port, deadline, &last);
    if (s.valid()) {
      uint8_t answer = 0;
      IoResult sent = send_all(s.fd(), hello.data(), hello.size(), deadline);
      IoResult got = sent.status == IoStatus::kOk ? recv_exact(s.fd(), &answer, 1, deadline) : sent;
      if (got.status == IoStatus::kOk && answer == kTcpMeshAccepted) return s;
      last = got.status == IoStatus::kOk ? "unexpected answer to the hello" : "the peer closed the connection during the hello";
      if (got.status == IoStatus::kTimeout) break;
    }
    // Bounded back-off between attempts (the peer's listener is published before it accepts).
    std::this_thread::sleep_for(Milliseconds(std::min(100, 5 << std::min(attempt, 4))));
  }
  throw TimeoutError(concat("[tcp rendezvous] rank ", rank, " could not connect to rank ", peer, " at ", address, ": ", last,
                            " (is that address reachable from here? set TESSERA_SOCKET_IFNAME to the interface the "
                            "hosts share)"));
}

// Reads and checks one hello on a freshly accepted connection; the peer's rank, or -1 to drop it.
int read_hello(Socket& s, int rank, int size, const std::string& key, const std::vector<Socket>& peers,
               Clock::time_point deadline) {
  const Clock::time_point due = std::min(deadline, Clock::now() + kHelloTimeout);
  uint8_t head[16];
  if (recv_exact(s.fd(), head, sizeof head, due).status != IoStatus::kOk) return -1;
  const uint32_t magic = get_u32(head), peer = get_u32(head + 4), peer_size = get_u32(head + 8), key_bytes = get_u32(head + 12);
  if (magic != kTcpMeshMagic || peer_size != static_cast<uint32_t>(size) || key_bytes != key.size() || key_bytes > kMaxKeyBytes)
    return -1;
  if (peer <= static_cast<uint32_t>(rank) || peer >= static_cast<uint32_t>(size) || peers[peer].valid()) return -1;
  std::string presented(key_bytes, '\0');
  if (recv_exact(s.fd(), reinterpret_cast<uint8_t*>(presented.data()), key_bytes, due).status != IoStatus::kOk) return -1;
  if (presented != key) return -1;
  const uint8_t accepted = kTcpMeshAccepted;
  if (send_all(s.fd(), &accepted, 1, due).status != IoStatus::kOk) return -1;
  return static_cast<int>(peer);
}

}  // namespace

std::string tcp_bind_host(int local_size, int size) {
  if (size == 1 || local_size == size) return "127.0.0.1";
  return advertised_address();
}

TcpMesh connect_tcp_mesh(Store& store, int rank, int size, const std::string& bind_host, Milliseconds timeout) {
  const Clock::time_point deadline = deadline_after(timeout);
  TcpMesh mesh;
  mesh.rank = rank, mesh.size = size;
  mesh.peers.resize(static_cast<size_t>(size));
  mesh.addresses.resize(static_cast<size_t>(size));
  if (size == 1) return mesh;
  const std::string prefix = concat("[tcp rendezvous] rank ", rank, " of ", size, ": ");
  if (rank == 0) store.set("tcp/key", launcher::random_job_token());
  Socket listener = listen_tcp(bind_host, 0, size);
  mesh.addresses[static_cast<size_t>(rank)] = format_address(bind_host, local_port(listener.fd()));
  store.set(concat("tcp/addr/", rank), mesh.addresses[static_cast<size_t>(rank)]);
  std::vector<std::string> keys = {"tcp/key"};
  for (int r = 0; r < size; ++r) keys.push_back(concat("tcp/addr/", r));
  try {
    store.wait(keys, std::chrono::ceil<Milliseconds>(deadline - Clock::now()));
  } catch (const TimeoutError& e) {
    throw TimeoutError(prefix + "not every rank published its address in time: " + e.what());
  }
  const std::string key = store.get_string("tcp/key");
  for (int r = 0; r < size; ++r) mesh.addresses[static_cast<size_t>(r)] = store.get_string(concat("tcp/addr/", r));
  for (int peer = 0; peer < rank; ++peer)
    mesh.peers[static_cast<size_t>(peer)] = connect_to(rank, peer, size, key, mesh.addresses[static_cast<size_t>(peer)], deadline);
  for (int expected = size - 1 - rank; expected > 0;) {
    pollfd p{listener.fd(), POLLIN, 0};
    int rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) {
      std::string missing;
      for (int r = rank + 1; r < size; ++r)
        if (!mesh.peers[static_cast<size_t>(r)].valid()) missing += concat(missing.empty() ? "" : ", ", r);
      throw TimeoutError(concat(prefix, "ranks ", missing, " did not connect to ", mesh.addresses[static_cast<size_t>(rank)],
                                " within ", timeout.count(), " ms"));
    }
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    Socket s(fd);
    const int peer = read_hello(s, rank, size, key, mesh.peers, deadline);
    if (peer < 0) continue;  // not one of ours: closed here
    mesh.peers[static_cast<size_t>(peer)] = std::move(s);
    --expected;
  }
  for (auto& s : mesh.peers)
    if (s.valid()) set_nodelay(s.fd());
  return mesh;
}

}  // namespace tessera::dist::detail
