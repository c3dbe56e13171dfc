#include "tessera/core/cpu_allocator.h"

#include <atomic>
#include <cstdlib>
#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/util/settings.h"

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_ALLOCATOR_CACHE 0  // let AddressSanitizer see every use after free
#else
#define TESSERA_ALLOCATOR_CACHE 1
#endif

namespace tessera::cpu_allocator {

namespace {

constexpr size_t kLargeBlock = size_t{64} << 10;  // cache blocks from 64 KiB
constexpr size_t kPage = 4096;

size_t cache_limit_bytes() {
  static const size_t limit = [] {
    const char* env = env_setting("TESSERA_CPU_CACHE_MB");
    if (!env) return size_t{2048} << 20;
    char* end = nullptr;
    unsigned long long mb = std::strtoull(env, &end, 10);
    TESSERA_CHECK(end != env && *end == '\0', "[TESSERA_CPU_CACHE_MB] expected a number of MiB, got '", env, "'");
    return static_cast<size_t>(mb) << 20;
  }();
  return limit;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // by rounded size
  size_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed during static destruction
  return *c;
}

// Bytes held by live tensors (not the cache), and the most held at once since the last reset: the
// figure `tessera bench model-parallel` compares across layouts. Relaxed atomics: a counter, not a lock.
std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};

void count_allocation(size_t size) {
  int64_t now = live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed) + static_cast<int64_t>(size);
  int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

size_t rounded(size_t nbytes) {
  return nbytes >= kLargeBlock ? (nbytes + kPage - 1) / kPage * kPage : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
}

void* system_allocate(size_t size) {
  void* p = std::aligned_alloc(kAlignment, size);
  if (!p) throw Error(detail::concat("[allocate] out of memory allocating ", size, " bytes"));
  return p;
}

}  // namespace

void* allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  size_t size = rounded(nbytes);
  count_allocation(size);
  if (TESSERA_ALLOCATOR_CACHE && size >= kLargeBlock) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.bytes -= size;
      return p;
    }
  }
  return system_allocate(size);
}

void deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t size = rounded(nbytes);
  live_bytes.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
  if (TESSERA_ALLOCATOR_CACHE && size >= kLargeBlock) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.bytes + size <= cache_limit_bytes()) {
      c.free_blocks[size].push_back(ptr);
      c.bytes += size;
      return;
    }
  }
  std::free(ptr);
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [size, blocks] : c.free_blocks)
    for (void* p : blocks) std::free(p);
  c.free_blocks.clear();
  c.bytes = 0;
}

size_t cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

size_t allocated_bytes() { return static_cast<size_t>(std::max<int64_t>(0, live_bytes.load())); }
size_t peak_allocated_bytes() { return static_cast<size_t>(std::max<int64_t>(0, peak_bytes.load())); }
void reset_peak_allocated_bytes() { peak_bytes.store(live_bytes.load()); }

}  // namespace tessera::cpu_allocator
