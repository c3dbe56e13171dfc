// Symmetric memory of the shm backend (Communicator::allocate_symmetric): each rank's buffer is an
// unnamed shared-memory file of its own (memfd) that every peer maps, so an allreduce over it needs
// no copy through the segment's slots. The protocol (ShmCommunicator::allreduce_symmetric) is two waits:
//   1. every rank writes a descriptor (its round, which buffer, offset, count, dtype, op) into its
//      slot and arrives: all inputs are complete in their buffers;
//   2. each rank checks the peers' descriptors, reduces its share (cache-line aligned, as the
//      slotted allreduce splits it) across every rank's buffer in rank order, writes the result
//      into every rank's buffer, and arrives: once all have, every buffer holds the whole result.
// Per rank that reads the data once and writes it once, against about twice each for the slotted
// allreduce (copy in, reduce, copy out). Ranks write only their own share of a peer's buffer, and
// read only their own share, so nothing else is needed between the two waits; after the second,
// no peer touches this rank's buffer until the next allreduce's first wait.
// Allocation is collective, two rounds through the slots: each rank's file as /proc/<pid>/fd/<fd>
// (the rank keeps the descriptor open meanwhile), then whether every rank mapped every buffer.
// Where any rank cannot create or map one (no memory; ranks in different PID namespaces), every
// rank gets nullptr and the caller ordinary memory. Having no name, a buffer can never be left
// behind in /dev/shm, even by a killed process, and /dev/shm's size does not bound it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "tessera/dist/backends/shm/shm_segment.h"

namespace tessera::dist::detail {

// One symmetric allocation: this rank's buffer and the peers' (mapped here), by rank.
struct SymmetricBuffer {
  uint64_t id = 0;  // allocation number, the same on every rank (allocations are collective)
  size_t bytes = 0;
  std::vector<char*> base;  // base[p]: rank p's buffer as mapped in this process
  std::vector<ShmSegment> peer_mappings;
};

// The live symmetric buffers of one communicator. Lookups run on the group's worker thread;
// removal runs wherever the last tensor on a buffer goes, hence the mutex.
class SymmetricRegistry {
 public:
  void add(std::shared_ptr<SymmetricBuffer> buffer);
  void remove(uint64_t id);
  // The buffer holding [data, data + bytes) on this rank (`rank`), or null.
  std::shared_ptr<SymmetricBuffer> find(const void* data, size_t bytes, int rank) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<SymmetricBuffer>> buffers_;
};

}  // namespace tessera::dist::detail
