// ShmCommunicator's symmetric memory: allocation (one unnamed shared-memory file per rank per
// buffer, which the peers open through /proc/<pid>/fd as the slots tell them) and the registry its
// allreduce looks buffers up in. The allreduce itself is in shm_collectives.cpp; the protocol is
// described in shm_symmetric.h.
#include "tessera/dist/backends/shm/shm_symmetric.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "tessera/core/error.h"
#include "tessera/dist/backends/shm/shm_communicator.h"

namespace tessera::dist {

namespace detail {

void SymmetricRegistry::add(std::shared_ptr<SymmetricBuffer> buffer) {
  std::lock_guard lock(mu_);
  buffers_.push_back(std::move(buffer));
}

void SymmetricRegistry::remove(uint64_t id) {
  std::lock_guard lock(mu_);
  std::erase_if(buffers_, [id](const auto& b) { return b->id == id; });
}

std::shared_ptr<SymmetricBuffer> SymmetricRegistry::find(const void* data, size_t bytes, int rank) const {
  const char* p = static_cast<const char*>(data);
  std::lock_guard lock(mu_);
  for (const auto& b : buffers_) {
    const char* base = b->base[static_cast<size_t>(rank)];
    if (p >= base && p + bytes <= base + b->bytes) return b;
  }
  return nullptr;
}

}  // namespace detail

std::shared_ptr<void> ShmCommunicator::allocate_symmetric(size_t bytes, Deadline deadline) {
  if (size_ == 1 || bytes == 0) return nullptr;  // nothing to share
  // An unnamed file (memfd): nothing can be left in /dev/shm whatever ends a process, and a
  // container's small /dev/shm does not bound it. A rank that cannot create one (out of memory)
  // passes no descriptor: then every rank returns nullptr and the caller uses ordinary memory.
  detail::ShmSegment mine;
  try {
    mine = detail::ShmSegment::create_unnamed(bytes);
  } catch (const IoError& e) {
    std::fprintf(stderr, "[shm] rank %d: no symmetric memory of %zu bytes (%s); using ordinary memory\n", rank_,
                 bytes, e.what());
  }

  auto buffer = std::make_shared<detail::SymmetricBuffer>();
  buffer->bytes = bytes;
  buffer->base.assign(static_cast<size_t>(size_), nullptr);
  buffer->base[static_cast<size_t>(rank_)] = mine.data();
  // Round 1: each rank's file as /proc/<pid>/fd/<fd>, through its slot (empty: none). The peers
  // read it before arriving at round 2, and this rank keeps the descriptor open until then.
  const uint64_t k = begin_round("allocate_symmetric", deadline, 2);
  const std::string path = mine.peer_path();
  TESSERA_ASSERT(path.size() < chunk_bytes_, "path longer than a slot");
  std::memcpy(slot(rank_, k), path.c_str(), path.size() + 1);
  arrive_and_wait(k, "allocate_symmetric", deadline);
  bool everyone_created = true;  // this rank's own slot included: its path is empty if it made none
  for (int p = 0; p < size_; ++p) everyone_created = everyone_created && slot(p, k)[0] != '\0';
  if (!everyone_created) return nullptr;  // the same answer on every rank, after the same round
  bool mapped_all = true;
  for (int p = 0; p < size_ && mapped_all; ++p) {
    if (p == rank_) continue;
    try {
      buffer->peer_mappings.push_back(detail::ShmSegment::open_path(std::string(slot(p, k)), bytes));
      buffer->base[static_cast<size_t>(p)] = buffer->peer_mappings.back().data();
    } catch (const IoError& e) {
      std::fprintf(stderr, "[shm] rank %d: cannot map rank %d's symmetric buffer (%s); using ordinary memory\n",
                   rank_, p, e.what());
      mapped_all = false;
    }
  }
  // Round 2: whether each rank mapped every buffer (all must have, or all fall back). Then the
  // descriptor can close (here, or with `mine` on a return); the mappings keep the memory.
  const uint64_t k2 = begin_round("allocate_symmetric", deadline, 2);
  slot(rank_, k2)[0] = mapped_all ? 1 : 0;
  arrive_and_wait(k2, "allocate_symmetric", deadline);
  for (int p = 0; p < size_; ++p) mapped_all = mapped_all && slot(p, k2)[0] == 1;
  if (!mapped_all) return nullptr;
  mine.close_descriptor();
  buffer->id = ++symmetric_allocations_;
  symmetric_->add(buffer);

  // The memory stays mapped while the caller holds it; the registry forgets it then (if the
  // communicator still exists), so a later buffer at the same address is not taken for it.
  std::weak_ptr<detail::SymmetricRegistry> registry = symmetric_;
  const uint64_t id = buffer->id;
  char* data = mine.data();
  auto held = std::make_shared<detail::ShmSegment>(std::move(mine));
  return std::shared_ptr<void>(data, [registry, id, held](void*) mutable {
    if (auto r = registry.lock()) r->remove(id);
    held.reset();
  });
}

}  // namespace tessera::dist
