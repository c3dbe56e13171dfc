// ShmCommunicator: tessera's collectives for ranks on one machine, through one shared-memory
// segment per group (no sockets, no kernel copies).
//
// Segment layout (shm_communicator.cpp): a header page; per rank one counter (shm_sync.h); per
// rank a slot of three buffers of chunk_bytes. A collective runs in rounds, each over at most one
// chunk, numbered on from one collective to the next; round k uses buffer k % 3 of the slots, so
// a tensor of any size streams through a segment of 3 * size * chunk_bytes.
//
// One flag per round: in round k a rank writes its part into its slot, publishes counter = k+1
// ("arrived at k") and waits until every peer's counter is >= k+1; then it reads the peers'
// round-k buffers. Before rewriting a buffer a rank needs every peer done reading its previous
// contents; begin_round tracks per buffer when that is (the reads of a round end before the
// reader arrives at round + 1, + 2 or + 3, depending on the collective). The wait of the previous
// round usually gave it already; broadcast's root, which waits for nobody, runs up to two
// rounds ahead of the readers.
//
// Allreduce is a reduce-scatter and an allgather pipelined over rounds, with one wait per round:
//   round k: copy the other ranks' shares of chunk k of my input into my slot; arrive; wait;
//            copy out chunk k-1's reduced shares (the peers reduced them before arriving at k);
//            reduce my share of chunk k across every rank, in rank order, from my own input in
//            place and the peers' slots, into my output and my slot;
//   one extra round at the end, with no data, to copy out the last chunk.
// Per rank that copies in (n-1)/n of the data, reads it all once to reduce, and copies out
// (n-1)/n; every rank reduces its share in rank order, so all get bitwise the same result.
// A small tensor (up to kOneRoundBytes) takes one round instead of two: every rank copies all of
// it into its slot, arrives, waits, and reduces all of it from the slots, in rank order. It reads
// n times the data instead of once, which costs less than a second wait up to 32 KiB: measured with
// bench/compare_comm.py, 2 processes, busbw 3.8 GB/s at 32 KiB in one round (Open MPI 2.4), but at
// 64 KiB one round gave 2.5 GB/s and two rounds 3.3. The
// first version waited twice per round (arrived, then reduced): 16 MiB over 2 processes took
// 6.9-7.2 ms against 5.7-5.8 ms for this one, measured in one run on this loaded 2-core machine.
//
// Symmetric memory (allocate_symmetric, as DDP's gradient buckets use): an allreduce over it reads
// and writes the peers' buffers directly, with no copy through the slots (shm_symmetric.h).
//
// Point-to-point: tagged rings per ordered pair of ranks in the same segment, after the slots
// (shm_point_to_point.h). The collectives' waits progress them too.
#pragma once
#include <sys/types.h>

#include <memory>

#include "tessera/dist/backends/backend.h"
#include "tessera/dist/backends/shm/shm_point_to_point.h"
#include "tessera/dist/backends/shm/shm_segment.h"
#include "tessera/dist/backends/shm/shm_symmetric.h"
#include "tessera/dist/backends/shm/shm_sync.h"

namespace tessera::dist {

namespace detail {
// This machine as processes that can share memory tell it apart: its hostname and kernel boot id.
std::string machine_identity();
}  // namespace detail

class ShmCommunicator final : public Communicator {
 public:
  // Rendezvous through context.store (collective over the group's ranks): ValueError when the
  // ranks are not all on this machine, IoError when the segment cannot be created or opened.
  explicit ShmCommunicator(const BackendContext& context);

  const char* backend_name() const override { return "shm"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  // Allreduces that took the symmetric-memory path (shm_symmetric.h) so far.
  uint64_t symmetric_allreduces() const { return symmetric_allreduces_; }

  void allreduce(Buffer data, ReduceOp op, Deadline deadline) override;
  void broadcast(Buffer data, int root, Deadline deadline) override;
  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override;
  void allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) override;
  void reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op,
                      Deadline deadline) override;
  void alltoall(Buffer input, Buffer output, Deadline deadline) override;
  void barrier(Deadline deadline) override;

  std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag) override;
  std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag) override;

  std::unique_ptr<Communicator> split(std::span<const int> ranks, std::shared_ptr<Store> store,
                                      Milliseconds timeout) override;
  bool reduces_average() const override { return true; }
  // An unnamed shared-memory file per rank that every peer maps (shm_symmetric.h).
  std::shared_ptr<void> allocate_symmetric(size_t bytes, Deadline deadline) override;
  bool abortable() const override { return true; }
  void abort() override {
    if (sync_) sync_->abort();  // a group of one has nothing to wait for
  }
  void leave() override {
    if (sync_) sync_->leave();
  }

 private:
  static constexpr int kBuffers = 3;  // per slot; see above
  static constexpr size_t kOneRoundBytes = 32 << 10;  // see above
  // Buffer `round % 3` of `rank`'s slot.
  char* slot(int rank, uint64_t round) const;
  // Starts a round that writes this rank's slot: returns its number once the buffer is free.
  // `read_lag`: the peers are done reading what this round writes once they arrive at round
  // number + read_lag (3 for allreduce, whose copy-out comes a round later; 1 for broadcast).
  uint64_t begin_round(const char* op, Deadline deadline, uint64_t read_lag);
  // Ends round k: arrived, then wait for every peer (or only `only_peer`).
  void arrive_and_wait(uint64_t k, const char* op, Deadline deadline, int only_peer = -1);
  // allreduce and reduce: `root` < 0 copies the result out on every rank, else on root only.
  void reduce_rounds(Buffer data, ReduceOp op, int root, const char* op_name, Deadline deadline);
  void reduce_one_round(Buffer data, ReduceOp op, int root, const char* op_name, Deadline deadline);
  // The allreduce over symmetric memory (shm_symmetric.h); false, doing nothing, when `data` is
  // not in a symmetric buffer of this communicator.
  bool allreduce_symmetric(Buffer data, ReduceOp op, Deadline deadline);
  // reduce_scatter and alltoall: each rank sends piece j of its input to rank j; `reduce` false
  // copies the pieces (alltoall) instead of reducing them.
  void exchange_rounds(Buffer input, Buffer output, std::span<const int64_t> counts, bool reduce, ReduceOp op,
                       const char* op_name, Deadline deadline);

  int rank_ = 0;
  int size_ = 1;
  size_t chunk_bytes_ = 0;
  detail::ShmSegment segment_;
  std::shared_ptr<detail::ShmPointToPoint> point_to_point_;  // before sync_, whose idle hook uses it
  std::unique_ptr<detail::ShmSync> sync_;
  char* slots_ = nullptr;
  // The next round; counts on from one collective to the next. 64 bits so that round % 3 never
  // wraps; the shared counters hold its low 32 bits and compare wrap-around safe.
  uint64_t round_ = 0;
  // Per buffer of my slot: the counter every peer must reach before I may overwrite it.
  uint64_t reusable_at_[kBuffers] = {};
  std::shared_ptr<detail::SymmetricRegistry> symmetric_ = std::make_shared<detail::SymmetricRegistry>();
  uint64_t symmetric_allocations_ = 0;
  uint64_t symmetric_allreduces_ = 0;
};

}  // namespace tessera::dist
