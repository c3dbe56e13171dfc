// BlockPool: the bookkeeping of a caching device allocator (PyTorch's CUDACachingAllocator, and
// flashlight's CachingMemoryManager, work this way). Memory comes from the device in segments;
// a request takes the smallest free block that fits (best fit), split when the rest is worth
// keeping; a freed block merges with its free neighbours in the segment, so a later larger request
// fits where smaller ones were. Small requests (< 1 MiB) come from 2 MiB segments of their own, so
// they never split a large block into pieces no large request can use again.
//
// The pool knows nothing of CUDA: a Source reserves and releases segments (cudaMalloc and cudaFree
// for the CUDA allocator, backend/cuda/caching_allocator.cpp; plain addresses in the tests), so its
// policy is tested on any machine. Not thread-safe: its owner holds a lock.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

namespace tessera {

class BlockPool {
 public:
  struct Source {
    // A new segment of `bytes`, or nullptr when the device has no room for it.
    std::function<void*(size_t bytes)> reserve;
    std::function<void(void* segment, size_t bytes)> release;
    // The most the pool may reserve in all (TESSERA_CUDA_MEMORY_FRACTION of the device); 0: no cap.
    size_t limit = 0;
  };

  struct Stats {
    size_t allocated = 0;       // bytes of blocks handed out (rounded sizes)
    size_t peak_allocated = 0;  // the most since the last reset_peak
    size_t reserved = 0;        // bytes of segments held
    size_t peak_reserved = 0;
    size_t segments = 0;
    size_t cached_blocks = 0;   // free blocks kept for reuse
  };

  static constexpr size_t kRound = 512;                 // every size rounds up to this (cudaMalloc's alignment)
  static constexpr size_t kSmallRequest = size_t{1} << 20;  // below: the small pool
  static constexpr size_t kSmallSegment = size_t{2} << 20;  // the small pool's segment size
  static constexpr size_t kLargeRound = size_t{2} << 20;    // large segments round up to this
  // A large request up to this size gets a segment this big, so neighbours of similar size share it.
  static constexpr size_t kMidSegment = size_t{20} << 20;
  static constexpr size_t kMidRequest = size_t{10} << 20;

  explicit BlockPool(Source source);
  ~BlockPool();  // releases every segment
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // At least `bytes` (0 gives nullptr). When the device has no room, the free segments are released
  // and the reservation tried once more; then nullptr (the owner raises the error with its figures).
  void* allocate(size_t bytes);
  // Gives back a pointer allocate returned (InternalError for any other).
  void free(void* ptr);
  // Releases every segment whose memory is all free; returns the bytes released.
  size_t release_cached();

  Stats stats() const;
  void reset_peak() {
    stats_.peak_allocated = stats_.allocated;
    stats_.peak_reserved = stats_.reserved;
  }
  static size_t rounded(size_t bytes) { return (bytes + kRound - 1) / kRound * kRound; }

 private:
  struct Block;
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BySizeThenAddress>;

  FreeSet& pool_for(size_t size) { return size < kSmallRequest ? small_free_ : large_free_; }
  size_t segment_size_for(size_t size) const;
  Block* take_segment(size_t size);  // a new segment as one free block, or nullptr
  Block* split(Block* block, size_t size, FreeSet& pool);
  void release_segment(Block* block);

  Source source_;
  FreeSet small_free_, large_free_;
  std::unordered_map<void*, Block*> allocated_;
  Stats stats_;
};

}  // namespace tessera
