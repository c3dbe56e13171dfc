#include "tessera/core/cpu_allocator.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <mutex>
#include <string>
#include <string_view>
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
  static const size_t limit = static_cast<size_t>(env_int("TESSERA_CPU_CACHE_MB", 2048)) << 20;
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

size_t budget_from_env() {
  const char* env = env_setting("TESSERA_MEMORY_BUDGET");
  return env ? parse_memory_budget(env) : 0;
}

// Read from the environment on first use, so that a test or a program can still set it before its
// first tensor; set_memory_budget replaces it.
std::atomic<size_t>& budget() {
  static std::atomic<size_t> bytes{budget_from_env()};
  return bytes;
}

std::string mib(size_t bytes) {
  return detail::concat(static_cast<double>(bytes) / double(1 << 20), " MiB");
}

[[noreturn]] void refuse(size_t nbytes, size_t live, size_t limit) {
  throw OutOfMemoryError(detail::concat(
      "[allocate] refused ", nbytes, " bytes: live tensors hold ", live, " bytes (", mib(live),
      ") and this would take them past the memory budget of ", limit, " bytes (", mib(limit),
      "; cached free blocks not counted). Free tensors or use a smaller batch, or raise the budget: "
      "TESSERA_MEMORY_BUDGET=<bytes, or with K/M/G> (unset: no budget), train.memory_budget_mb in a "
      "training config, or cpu_allocator::set_memory_budget(bytes) (0: no budget)"));
}

// Counts `size` bytes as live, or throws OutOfMemoryError when that would pass the budget. The add
// comes first and is undone on refusal, so two threads racing for the last bytes cannot both pass.
void count_allocation(size_t nbytes, size_t size) {
  const size_t limit = budget().load(std::memory_order_relaxed);
  if (limit != 0 && size > limit) refuse(nbytes, allocated_bytes(), limit);  // also keeps `now` from overflowing
  int64_t now = live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed) + static_cast<int64_t>(size);
  if (limit != 0 && static_cast<size_t>(now) > limit) {
    live_bytes.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
    refuse(nbytes, static_cast<size_t>(now) - size, limit);
  }
  int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

size_t rounded(size_t nbytes) {
  return nbytes >= kLargeBlock ? (nbytes + kPage - 1) / kPage * kPage : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
}

void* system_allocate(size_t size) {
  void* p = std::aligned_alloc(kAlignment, size);
  if (!p) {
    live_bytes.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
    throw OutOfMemoryError(detail::concat("[allocate] the system refused ", size, " bytes (live tensors hold ",
                                          allocated_bytes(), " bytes); free tensors or use a smaller batch"));
  }
  return p;
}

}  // namespace

void* allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  size_t size = rounded(nbytes);
  count_allocation(nbytes, size);
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

std::shared_ptr<void> allocate_shared(size_t nbytes) {
  return std::shared_ptr<void>(allocate(nbytes), [nbytes](void* p) { deallocate(p, nbytes); });
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

void set_memory_budget(size_t bytes) { budget().store(bytes, std::memory_order_relaxed); }
size_t memory_budget() { return budget().load(std::memory_order_relaxed); }

size_t parse_memory_budget(std::string_view text, std::string_view what) {
  auto refuse = [&] {
    return ValueError(detail::concat("[", what, "] expected a number of bytes with an optional K, M or G suffix "
                                     "(powers of 1024), e.g. 512M or 2G, got '", text, "'"));
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 19) throw refuse();  // 19 digits always fit in 64 bits
  const size_t value = std::stoull(std::string(text.substr(0, digits)));
  const std::string_view suffix = text.substr(digits);
  int shift = 0;
  if (suffix.size() == 1 && (suffix[0] == 'k' || suffix[0] == 'K')) shift = 10;
  else if (suffix.size() == 1 && (suffix[0] == 'm' || suffix[0] == 'M')) shift = 20;
  else if (suffix.size() == 1 && (suffix[0] == 'g' || suffix[0] == 'G')) shift = 30;
  else if (!suffix.empty()) throw refuse();
  if (value > (SIZE_MAX >> shift)) throw refuse();
  return value << shift;
}

}  // namespace tessera::cpu_allocator
