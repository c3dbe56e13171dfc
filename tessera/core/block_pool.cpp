#include "tessera/core/block_pool.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "tessera/core/error.h"

namespace tessera {

struct BlockPool::Block {
  char* ptr;
  size_t size;
  bool free;
  bool small;     // which pool its segment belongs to
  Block* prev;    // neighbours within the segment (null at its ends)
  Block* next;
};

bool BlockPool::BySizeThenAddress::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

BlockPool::Stats BlockPool::stats() const {
  Stats s = stats_;
  s.cached_blocks = small_free_.size() + large_free_.size();
  return s;
}

BlockPool::BlockPool(Source source) : source_(std::move(source)) {}

BlockPool::~BlockPool() {
  // Every segment back to the source, live blocks or not (the owner is going away with them).
  std::vector<Block*> blocks(small_free_.begin(), small_free_.end());
  blocks.insert(blocks.end(), large_free_.begin(), large_free_.end());
  for (auto& [ptr, block] : allocated_) blocks.push_back(block);
  for (Block* head : blocks) {
    if (head->prev != nullptr) continue;
    size_t bytes = 0;
    for (Block* b = head; b != nullptr; b = b->next) bytes += b->size;
    source_.release(head->ptr, bytes);
  }
  for (Block* b : blocks) delete b;
}

size_t BlockPool::segment_size_for(size_t size) const {
  if (size < kSmallRequest) return kSmallSegment;
  if (size < kMidRequest) return kMidSegment;
  return (size + kLargeRound - 1) / kLargeRound * kLargeRound;
}

BlockPool::Block* BlockPool::take_segment(size_t size) {
  const size_t preferred = segment_size_for(size);
  // A mid-sized request's 20 MiB segment may not fit under the cap (or on the device) where a
  // segment of its own size would.
  const size_t least = size < kSmallRequest ? kSmallSegment : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
  std::vector<size_t> tries{preferred};
  if (least != preferred) tries.push_back(least);
  for (size_t bytes : tries) {
    if (source_.limit != 0 && stats_.reserved + bytes > source_.limit) continue;
    void* p = source_.reserve(bytes);
    if (p == nullptr) continue;
    stats_.reserved += bytes;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    ++stats_.segments;
    return new Block{static_cast<char*>(p), bytes, true, size < kSmallRequest, nullptr, nullptr};
  }
  return nullptr;
}

BlockPool::Block* BlockPool::split(Block* block, size_t size, FreeSet& pool) {
  const size_t remaining = block->size - size;
  // A small segment's rest is worth keeping from one unit up; a large block keeps a rest only above
  // the small pool's sizes (anything less would be a sliver no large request fits), so a large
  // request may get up to 1 MiB more than it asked, as with PyTorch's allocator.
  const bool worth = block->small ? remaining >= kRound : remaining > kSmallRequest;
  if (!worth) return block;
  Block* rest = new Block{block->ptr + size, remaining, true, block->small, block, block->next};
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  pool.insert(rest);
  return block;
}

void* BlockPool::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = rounded(bytes);
  FreeSet& pool = pool_for(size);
  Block key{nullptr, size, true, false, nullptr, nullptr};
  Block* block = nullptr;
  auto it = pool.lower_bound(&key);  // the smallest free block of at least `size`
  if (it != pool.end()) {
    block = *it;
    pool.erase(it);
  } else {
    block = take_segment(size);
    if (block == nullptr && release_cached() > 0) block = take_segment(size);
    if (block == nullptr) return nullptr;
  }
  block = split(block, size, pool);
  block->free = false;
  allocated_.emplace(block->ptr, block);
  stats_.allocated += block->size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return block->ptr;
}

void BlockPool::free(void* ptr) {
  auto it = allocated_.find(ptr);
  if (it == allocated_.end()) throw InternalError("[BlockPool] freeing a pointer it did not hand out");
  Block* block = it->second;
  allocated_.erase(it);
  stats_.allocated -= block->size;
  block->free = true;
  FreeSet& pool = block->small ? small_free_ : large_free_;
  // `right`, the block after `left` in their segment, merged into `left`.
  auto absorb = [](Block* left, Block* right) {
    left->size += right->size;
    left->next = right->next;
    if (right->next != nullptr) right->next->prev = left;
    delete right;
  };
  // Merge with free neighbours (each leaves the set before its size changes: the set orders by size).
  if (Block* prev = block->prev; prev != nullptr && prev->free) {
    pool.erase(prev);
    absorb(prev, block);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->free) {
    pool.erase(next);
    absorb(block, next);
  }
  pool.insert(block);
}

size_t BlockPool::release_cached() {
  size_t released = 0;
  for (FreeSet* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {  // part of a segment still in use
        ++it;
        continue;
      }
      it = pool->erase(it);
      source_.release(b->ptr, b->size);
      stats_.reserved -= b->size;
      --stats_.segments;
      released += b->size;
      delete b;
    }
  }
  return released;
}

}  // namespace tessera
