// Point-to-point over shared memory: tagged, asynchronous send and recv between the ranks of an shm
// group, so pipelines on one machine need no sockets (before this, backend auto sent them over
// gloo's TCP on loopback: 285 us one way for a 64 KiB activation against 31 us here, measured in
// one `tessera bench model-parallel` session, docs/benchmarks.md).
//
// Layout (in the group's segment, shm_communicator.cpp): per rank a doorbell (ShmCounter), then
// per ordered pair src -> dst of different ranks a ring of ring_bytes with two 64-bit positions, head (bytes the
// sender has written, ever) and tail (bytes the receiver has consumed). One writer and one reader
// per ring: the sender stores head with release after writing, the receiver stores tail with
// release after reading, each reads the other's with acquire.
//
// A message in a ring is a 16-byte header, then the payload:
//     u32 kShmMessageMagic | i32 tag | u64 payload bytes
// A message longer than the ring streams through it while the receiver drains it.
//
// Matching, as MPI's: messages between a pair with the same tag are received in the order sent;
// a message whose recv is not posted yet is drained into a private buffer ("unexpected") so that
// the ring never blocks messages behind it. Every call (post or wait) progresses every ring of
// this rank in both directions, so a recv waiting on one peer also drains and feeds the others,
// and sends posted before their receives never deadlock. The group's collectives progress it too
// while they wait (ShmSync's idle hook), so a send posted before a collective completes.
//
// Waking: after moving bytes a rank bumps the doorbell of the rank on the other side of the ring
// (new data for a receiver, free space for a sender); a waiter spins briefly, then sleeps on its
// own doorbell (a shared futex) in 20 ms slices, checking its deadline (TimeoutError naming the
// operation, both ranks, the tag and the bytes moved) and whether the peer's process still lives
// (PeerFailureError).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/dist/backends/backend.h"
#include "tessera/dist/backends/shm/shm_sync.h"

namespace tessera::dist::detail {

constexpr uint32_t kShmMessageMagic = 0x54535032;  // "TSP2"

// The positions of one ring, each on its own 128 bytes (shm_sync.h says why).
struct ShmRingPositions {
  alignas(128) std::atomic<uint64_t> head{0};
  alignas(128) std::atomic<uint64_t> tail{0};
};

// Bytes of the point-to-point area for `size` ranks and rings of `ring_bytes`.
size_t shm_point_to_point_bytes(int size, size_t ring_bytes);
// Ring bytes per ordered pair: 8 MiB shared by the size·(size-1) rings, between 64 KiB and 1 MiB,
// whole pages. TESSERA_SHM_RING_BYTES overrides it.
size_t choose_ring_bytes(int size);

class ShmPointToPoint : public std::enable_shared_from_this<ShmPointToPoint> {
 public:
  // `area`: shm_point_to_point_bytes(size, ring_bytes) bytes of the segment, constructed by rank 0
  // (initialise) before any rank uses it. Made with make_shared (transfers hold it weakly).
  ShmPointToPoint(char* area, size_t ring_bytes, int rank, int size, std::vector<pid_t> pids);
  ~ShmPointToPoint();
  static void initialise(char* area, int size);

  std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag);
  std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag);

  // Moves what can be moved now without waiting; for the collectives' waits. Skips when another
  // thread is already progressing.
  void progress_if_idle();


 private:
  struct SendState;
  struct RecvState;
  struct Unexpected;
  class Transfer;

  ShmRingPositions& positions(int src, int dst) const;
  char* ring(int src, int dst) const;
  ShmCounter& doorbell(int rank) const;
  void ring_doorbell(int rank);

  // With mu_ held: every ring of this rank, both ways.
  void progress();
  void push_sends(int peer);
  void pull_messages(int peer);
  void complete_bound_recvs(int peer);
  // "[shm recv] rank 1 from rank 0 (tag 3)", the front of every error.
  std::string describe(const char* op, int peer, int tag) const;
  std::string size_mismatch(int peer, int tag, uint64_t message_bytes, uint64_t buffer_bytes) const;
  // Until `done()` holds (checked under mu_ after each progress), or the deadline.
  template <typename Done> void wait_until(const Done& done, const char* op, int peer, int tag, Deadline deadline);
  // An abandoned transfer (destroyed before its wait finished) must not leave the engine pointing
  // at memory the caller frees.
  void abandon(const std::shared_ptr<SendState>& send);
  void abandon(int peer, const std::shared_ptr<RecvState>& recv);

  char* area_;
  size_t ring_bytes_;
  int rank_;
  int size_;
  std::vector<pid_t> pids_;
  std::mutex mu_;

  struct Incoming {  // the message being read from a peer's ring
    bool active = false;
    int tag = 0;
    uint64_t bytes = 0, got = 0;
    std::shared_ptr<RecvState> recv;          // straight into a posted recv's buffer, or
    std::shared_ptr<Unexpected> unexpected;   // into a private copy until one is posted
  };
  struct Peer {
    std::deque<std::shared_ptr<SendState>> sends;      // posted, in order; the front may be partly written
    std::list<std::shared_ptr<RecvState>> recvs;       // posted and not yet matched to a message
    std::list<std::shared_ptr<Unexpected>> unexpected; // arrived (maybe still arriving) and not yet matched
    std::list<std::shared_ptr<RecvState>> bound;       // matched to one of those, waiting for it whole
    Incoming incoming;
  };
  std::vector<Peer> peers_;
  std::atomic<int> spin_{256};  // pauses before sleeping; waits on several threads share it
};

}  // namespace tessera::dist::detail
