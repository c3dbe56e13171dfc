#include "tessera/dist/backends/tcp/tcp_transfers.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/util/settings.h"

namespace tessera::dist::detail {

using tessera::detail::concat;

const char* tcp_collective_name(TcpCollective c) {
  switch (c) {
    case TcpCollective::Allreduce: return "allreduce";
    case TcpCollective::Broadcast: return "broadcast";
    case TcpCollective::Allgather: return "allgather";
    case TcpCollective::ReduceScatter: return "reduce_scatter";
    case TcpCollective::Alltoall: return "alltoall";
    case TcpCollective::Barrier: return "barrier";
  }
  return "collective";
}

namespace {

void write_header(uint8_t* h, TcpCollective collective, uint64_t bytes) {
  std::memset(h, 0, kTcpHeaderBytes);
  for (int i = 0; i < 4; ++i) h[i] = static_cast<uint8_t>(kTcpMessageMagic >> (8 * i));
  h[4] = static_cast<uint8_t>(collective);
  for (int i = 0; i < 8; ++i) h[8 + i] = static_cast<uint8_t>(bytes >> (8 * i));
}

struct Step {
  TcpMesh& mesh;
  TcpCollective collective;
  std::string what() const { return concat("[tcp ", tcp_collective_name(collective), "] rank ", mesh.rank); }
  std::string peer(int r) const { return concat("rank ", r, " (", mesh.addresses[static_cast<size_t>(r)], ")"); }

  [[noreturn]] void closed(const TcpTransfer& t, const std::string& how) const {
    throw PeerFailureError(concat(what(), ": ", peer(t.peer), " ", how, " after ", t.done, " of ",
                                  kTcpHeaderBytes + t.bytes, " bytes ", t.send ? "sent" : "received",
                                  ": that process exited, was killed, or lost its network"));
  }

  void check_header(TcpTransfer& t) const {
    uint32_t magic = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < 4; ++i) magic |= uint32_t(t.header[i]) << (8 * i);
    for (int i = 0; i < 8; ++i) bytes |= uint64_t(t.header[8 + i]) << (8 * i);
    if (magic != kTcpMessageMagic)
      throw Error(concat(what(), ": ", peer(t.peer), " sent a message that is not a collective's (the streams are out of step)"));
    const auto theirs = static_cast<TcpCollective>(t.header[4]);
    if (theirs != collective || bytes != t.bytes)
      throw Error(concat(what(), ": ", peer(t.peer), " sent ", bytes, " bytes for ", tcp_collective_name(theirs), " where this rank expected ",
                         t.bytes, " bytes for ", tcp_collective_name(collective),
                         ": the ranks called different collectives, or the same one with different sizes"));
    t.header_checked = true;
  }

  // Moves as much as the socket takes now; true when the transfer is complete.
  bool progress(TcpTransfer& t) const {
    const int fd = mesh.peers[static_cast<size_t>(t.peer)].fd();
    const size_t total = kTcpHeaderBytes + t.bytes;
    while (t.done < total) {
      iovec iov[2];
      int n = 0;
      if (t.done < kTcpHeaderBytes) iov[n++] = {t.header + t.done, kTcpHeaderBytes - t.done};
      const size_t payload_done = t.done > kTcpHeaderBytes ? t.done - kTcpHeaderBytes : 0;
      if (t.bytes > payload_done) iov[n++] = {t.data + payload_done, t.bytes - payload_done};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n);
      const ssize_t k = t.send ? ::sendmsg(fd, &msg, MSG_NOSIGNAL) : ::recvmsg(fd, &msg, 0);
      if (k > 0) {
        const size_t before = t.done;
        t.done += static_cast<size_t>(k);
        if (!t.send) {
          if (!t.header_checked && t.done >= kTcpHeaderBytes) check_header(t);
          if (t.on_progress && t.done > kTcpHeaderBytes && t.done > before) t.on_progress(t.done - kTcpHeaderBytes);
        }
        continue;
      }
      if (k == 0 && !t.send) closed(t, "closed its connection");
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
      closed(t, concat("reset its connection (", std::strerror(errno), ")"));
    }
    if (!t.send && !t.header_checked) check_header(t);  // a zero-byte header cannot be: kept for safety
    return true;
  }
};

// A collective retries its sockets for a while before poll() puts the thread to sleep, and the
// while starts again each time bytes move: a wake-up from poll costs tens of microseconds on this
// virtual machine, more than a small exchange, and a large one that sleeps whenever its socket
// buffer drains pays it again and again. Each retry yields the core, so where ranks outnumber cores
// the peer being waited for runs meanwhile. Measured across test hosts (docs/benchmarks.md):
//   - 4 KiB all-reduce, spinning for at most 100 us from the start: 2 hosts x 1, 11 us against 52-87
//     us sleeping at once; 4 hosts x 1 on the 2 cores, 41-54 us against 106-131 us (without the
//     yield, 260-320 us);
//   - spinning at every size with the budget restarted by progress, against spinning only up to
//     64 KiB: 2 hosts x 1, 128 KiB 82-84 us against 94-199, 4 MiB 2.4-3.2 ms against 3.7-3.9;
//     `tessera bench ddp --hosts 2` unshaped, MLP 31-35k samples/s against 20k, CNN 5.6-5.7k against
//     4.3-4.7k; 4 hosts x 1 (oversubscribed) within the noise.
constexpr long kDefaultSpinMicroseconds = 100;

long spin_microseconds() {
  static const long us = static_cast<long>(env_int("TESSERA_TCP_SPIN_US", kDefaultSpinMicroseconds));
  return us;
}

}  // namespace

void run_transfers(TcpMesh& mesh, TcpCollective collective, std::span<TcpTransfer> transfers, Clock::time_point deadline,
                   const std::atomic<bool>& aborted) {
  Step step{mesh, collective};
  if (aborted.load(std::memory_order_relaxed)) throw Error(concat(step.what(), ": the process group failed earlier"));
  for (auto& t : transfers) {
    TESSERA_CHECK(t.peer >= 0 && t.peer < mesh.size && t.peer != mesh.rank, step.what(), ": no connection to rank ", t.peer);
    t.done = 0;
    t.header_checked = false;
    if (t.send) write_header(t.header, collective, t.bytes);
  }
  std::vector<pollfd> fds;
  std::vector<size_t> waiting;
  const auto spin = std::chrono::microseconds(spin_microseconds());
  Clock::time_point spin_until = Clock::now() + spin;
  size_t moved_at_last_look = 0;
  for (;;) {
    fds.clear();
    waiting.clear();
    for (size_t i = 0; i < transfers.size(); ++i) {
      TcpTransfer& t = transfers[i];
      if (t.done == kTcpHeaderBytes + t.bytes && (t.send || t.header_checked)) continue;
      if (step.progress(t)) continue;
      fds.push_back({mesh.peers[static_cast<size_t>(t.peer)].fd(), static_cast<short>(t.send ? POLLOUT : POLLIN), 0});
      waiting.push_back(i);
    }
    if (waiting.empty()) return;
    const size_t moved = std::accumulate(transfers.begin(), transfers.end(), size_t{0},
                                         [](size_t sum, const TcpTransfer& t) { return sum + t.done; });
    const Clock::time_point now = Clock::now();
    if (moved != moved_at_last_look) moved_at_last_look = moved, spin_until = now + spin;
    if (spin.count() > 0 && now < spin_until) {  // try the sockets again before sleeping
      ::sched_yield();  // where ranks outnumber cores, the peer this rank waits for runs meanwhile
      continue;
    }
    if (aborted.load(std::memory_order_relaxed))
      throw Error(concat(step.what(), ": aborted while waiting for ", step.peer(transfers[waiting.front()].peer),
                         " (the process group failed)"));
    const int rc = ::poll(fds.data(), fds.size(), std::min(poll_timeout_ms(deadline), static_cast<int>(kTcpAbortSlice.count())));
    if (rc < 0 && errno != EINTR) throw IoError(concat(step.what(), ": poll failed: ", std::strerror(errno)));
    if (rc == 0 && Clock::now() >= deadline) {
      std::string outstanding;
      for (size_t i : waiting) {
        const TcpTransfer& t = transfers[i];
        outstanding += concat(outstanding.empty() ? "" : "; ", t.send ? "sending to " : "receiving from ", step.peer(t.peer), ": ",
                              t.done, " of ", kTcpHeaderBytes + t.bytes, " bytes");
      }
      throw TimeoutError(concat(step.what(), ": timed out waiting for its peers (", outstanding, ")"));
    }
  }
}

}  // namespace tessera::dist::detail
