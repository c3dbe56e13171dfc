// BlockPool, the caching device allocator's bookkeeping (core/block_pool.h), over a fake device whose
// segments are address ranges: best fit, splitting, merging, the small pool kept apart, the cap
// (TESSERA_CUDA_MEMORY_FRACTION), the retry after releasing cached segments, and, over a seeded
// random run of allocations and frees, that no two live blocks ever overlap and every byte is
// accounted for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "tessera/core/block_pool.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

constexpr size_t MiB = size_t{1} << 20;

// A device of `capacity` bytes: segments are address ranges (never dereferenced), far apart.
struct FakeDevice {
  explicit FakeDevice(size_t bytes) : capacity(bytes) {}
  size_t capacity;
  size_t used = 0;
  uintptr_t next = 1 << 30;
  std::map<uintptr_t, size_t> segments;
  int reserves = 0, releases = 0;

  BlockPool::Source source(size_t limit = 0) {
    BlockPool::Source s;
    s.reserve = [this](size_t bytes) -> void* {
      if (used + bytes > capacity) return nullptr;
      used += bytes;
      ++reserves;
      const uintptr_t at = next;
      next += bytes + (size_t{1} << 30);
      segments[at] = bytes;
      return reinterpret_cast<void*>(at);
    };
    s.release = [this](void* p, size_t bytes) {
      const auto it = segments.find(reinterpret_cast<uintptr_t>(p));
      ASSERT_NE(it, segments.end());
      ASSERT_EQ(it->second, bytes);
      segments.erase(it);
      used -= bytes;
      ++releases;
    };
    s.limit = limit;
    return s;
  }
};

uintptr_t at(void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(BlockPool, SmallRequestsSplitOneSegmentAndAFreedBlockIsReused) {
  FakeDevice device(1ull << 34);
  BlockPool pool(device.source());
  void* a = pool.allocate(1000);  // rounds to 1024
  void* b = pool.allocate(100);   // 512
  EXPECT_EQ(device.reserves, 1);  // one 2 MiB segment holds both
  EXPECT_EQ(at(b), at(a) + 1024);
  EXPECT_EQ(pool.stats().allocated, 1536u);
  EXPECT_EQ(pool.stats().reserved, BlockPool::kSmallSegment);
  pool.free(a);
  EXPECT_EQ(pool.allocate(1024), a);  // best fit: the freed 1 KiB, not the segment's rest
  EXPECT_EQ(pool.stats().peak_allocated, 1536u);
}

TEST(BlockPool, FreedNeighboursMergeSoALargerRequestFitsWhereSmallerOnesWere) {
  FakeDevice device(1ull << 34);
  BlockPool pool(device.source());
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool.allocate(4 * MiB));  // one 20 MiB segment
  EXPECT_EQ(device.reserves, 1);
  for (void* p : blocks) pool.free(p);
  void* whole = pool.allocate(16 * MiB);
  EXPECT_EQ(whole, blocks[0]);
  EXPECT_EQ(device.reserves, 1);
  EXPECT_EQ(pool.stats().cached_blocks, 1u);  // the 4 MiB rest, merged into one block
}

TEST(BlockPool, SmallRequestsNeverSplitALargeSegment) {
  FakeDevice device(1ull << 34);
  BlockPool pool(device.source());
  void* large = pool.allocate(30 * MiB);
  pool.free(large);
  void* small = pool.allocate(4096);
  EXPECT_EQ(device.reserves, 2);  // a small segment of its own
  EXPECT_NE(small, large);
  EXPECT_EQ(pool.allocate(30 * MiB), large);  // the large block is still whole
}

TEST(BlockPool, ALargeBlockKeepsOnlyARestWorthKeeping) {
  FakeDevice device(1ull << 34);
  BlockPool pool(device.source());
  void* p = pool.allocate(12 * MiB);  // a 12 MiB segment: exactly the request
  pool.free(p);
  void* q = pool.allocate(11 * MiB + 512 * 1024);  // the rest (512 KiB) is too small to split off
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool.stats().allocated, 12 * MiB);
  pool.free(q);
  void* r = pool.allocate(10 * MiB);  // a 2 MiB rest is kept
  EXPECT_EQ(r, p);
  EXPECT_EQ(pool.stats().allocated, 10 * MiB);
  EXPECT_EQ(pool.stats().cached_blocks, 1u);
}

TEST(BlockPool, TheCapAndTheDeviceAreHonouredAndCachedSegmentsReleasedBeforeGivingUp) {
  FakeDevice device(64 * MiB);
  BlockPool pool(device.source(/*limit=*/48 * MiB));
  void* a = pool.allocate(30 * MiB);
  EXPECT_EQ(pool.allocate(30 * MiB), nullptr);  // 60 MiB would pass the cap
  pool.free(a);
  // 40 MiB does not fit the cached 30 MiB segment; it is released, then the request fits the cap.
  void* b = pool.allocate(40 * MiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(device.releases, 1);
  EXPECT_EQ(pool.stats().reserved, 40 * MiB);
  // A mid-sized request whose 20 MiB segment would pass the cap takes a segment of its own size.
  void* c = pool.allocate(6 * MiB);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(pool.stats().reserved, 46 * MiB);
}

TEST(BlockPool, ReleaseCachedKeepsSegmentsInUse) {
  FakeDevice device(1ull << 34);
  BlockPool pool(device.source());
  void* a = pool.allocate(1024);
  void* b = pool.allocate(30 * MiB);
  void* c = pool.allocate(40 * MiB);
  pool.free(b);
  pool.free(c);
  EXPECT_EQ(pool.release_cached(), 70 * MiB);
  EXPECT_EQ(pool.stats().reserved, BlockPool::kSmallSegment);  // a's segment stays
  pool.free(a);
  EXPECT_EQ(pool.release_cached(), BlockPool::kSmallSegment);
  EXPECT_TRUE(device.segments.empty());
}

TEST(BlockPool, AForeignPointerIsAnError) {
  FakeDevice device(1ull << 34);
  BlockPool pool(device.source());
  int x = 0;
  EXPECT_THROW(pool.free(&x), InternalError);
  EXPECT_EQ(pool.allocate(0), nullptr);
}

TEST(BlockPool, RandomRunsNeverOverlapAndAccountForEveryByte) {
  for (uint64_t seed : {1, 2, 3}) {
    FakeDevice device(1ull << 36);
    BlockPool pool(device.source());
    std::mt19937_64 rng(seed);
    std::map<uintptr_t, size_t> live;  // start -> rounded size
    size_t live_bytes = 0;
    for (int step = 0; step < 4000; ++step) {
      if (live.empty() || rng() % 3 != 0) {
        // Mostly small, sometimes mid-sized or large, as a training step's tensors are.
        const uint64_t kind = rng() % 10;
        const size_t bytes = kind < 7 ? 1 + rng() % 65536 : kind < 9 ? MiB + rng() % (8 * MiB) : 10 * MiB + rng() % (40 * MiB);
        void* p = pool.allocate(bytes);
        ASSERT_NE(p, nullptr);
        const size_t size = BlockPool::rounded(bytes);
        auto next = live.lower_bound(at(p));
        if (next != live.end()) {
          ASSERT_LE(at(p) + size, next->first) << "overlaps the next live block";
        }
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second, at(p)) << "overlaps the previous live block";
        }
        live[at(p)] = size;
        live_bytes += size;
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        pool.free(reinterpret_cast<void*>(it->first));
        live_bytes -= it->second;
        live.erase(it);
      }
      // A large block may carry up to 1 MiB more than asked; never less.
      ASSERT_GE(pool.stats().allocated, live_bytes);
      ASSERT_LE(pool.stats().allocated, pool.stats().reserved);
      ASSERT_EQ(pool.stats().reserved, device.used);
    }
    for (auto [p, size] : live) pool.free(reinterpret_cast<void*>(p));
    EXPECT_EQ(pool.stats().allocated, 0u);
    pool.release_cached();
    EXPECT_EQ(pool.stats().reserved, 0u);
    EXPECT_TRUE(device.segments.empty());
  }
}

}  // namespace
}  // namespace tessera
