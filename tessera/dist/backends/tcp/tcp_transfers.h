// The one thing our TCP collectives do on the wire: a step of sends and receives to and from peers,
// all in flight at once (a ring step sends right while it receives from the left, both directions of
// a link busy), progressed with non-blocking sockets and poll() until every one is done or the
// deadline passes.
//
// Each message is a 16-byte header and the payload:
//     u32 kTcpMessageMagic | u8 collective | 3 bytes zero | u64 payload bytes
// The receiver knows what it expects (collectives run in the same order on every rank) and checks
// the header before taking the payload: ranks that called different collectives, or the same one
// with different sizes, get an error naming both instead of a silent wrong answer or a hang.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "tessera/dist/backends/tcp/tcp_mesh.h"

namespace tessera::dist::detail {

constexpr uint32_t kTcpMessageMagic = 0x54534D47;  // "TSMG"
constexpr size_t kTcpHeaderBytes = 16;

enum class TcpCollective : uint8_t { Allreduce = 1, Broadcast, Allgather, ReduceScatter, Alltoall, Barrier };
const char* tcp_collective_name(TcpCollective c);

struct TcpTransfer {
  int peer = 0;
  bool send = false;
  uint8_t* data = nullptr;  // the payload (read from for a send, written to for a receive)
  size_t bytes = 0;
  // For a receive: called with the payload bytes received so far, each time more arrived (a reduction
  // consumes its input while the rest is still on the wire).
  std::function<void(size_t)> on_progress;

  // Progress, kept by run_transfers.
  size_t done = 0;  // header and payload bytes moved
  uint8_t header[kTcpHeaderBytes] = {};
  bool header_checked = false;
};

// Runs every transfer to completion. TimeoutError at `deadline` naming the collective, this rank and
// the peers still outstanding with their progress; PeerFailureError when a peer closed or reset its
// connection; Error when a header shows the peer is in another collective or size, or within
// kTcpAbortSlice once `aborted` is set (Communicator::abort).
constexpr Milliseconds kTcpAbortSlice{20};
void run_transfers(TcpMesh& mesh, TcpCollective collective, std::span<TcpTransfer> transfers, Clock::time_point deadline,
                   const std::atomic<bool>& aborted);

}  // namespace tessera::dist::detail
