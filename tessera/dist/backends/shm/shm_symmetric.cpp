// ShmCommunicator's symmetric memory: allocation (one shared-memory object per rank per buffer,
// names exchanged through the slots) and the registry its allreduce looks buffers up in. The
// allreduce itself is in shm_collectives.cpp; the protocol is described in shm_symmetric.h.
#include "tessera/dist/backends/shm/shm_symmetric.h"

#include <algorithm>
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

namespace {

constexpr size_t kSymmetricPage = 4096;
constexpr size_t kMaxNameBytes = 255;  // NAME_MAX for shm_open

// Removes a shared-memory name when it goes out of scope: once every rank has mapped the buffer,
// and on every error path, so that nothing is left in /dev/shm.
struct UnlinkOnExit {
  std::string name;
  ~UnlinkOnExit() { detail::ShmSegment::unlink(name); }
};

}  // namespace

std::shared_ptr<void> ShmCommunicator::allocate_symmetric(size_t bytes, Deadline deadline) {
  if (size_ == 1 || bytes == 0) return nullptr;  // nothing to share
  const size_t mapped = (bytes + kSymmetricPage - 1) / kSymmetricPage * kSymmetricPage;
  auto mine = std::make_shared<detail::ShmSegment>(detail::ShmSegment::create(mapped));
  UnlinkOnExit unlink{mine->name()};
  TESSERA_ASSERT(mine->name().size() <= kMaxNameBytes && kMaxNameBytes < chunk_bytes_, "shm name too long");

  auto buffer = std::make_shared<detail::SymmetricBuffer>();
  buffer->id = ++symmetric_allocations_;
  buffer->bytes = bytes;
  buffer->base.assign(static_cast<size_t>(size_), nullptr);
  buffer->base[static_cast<size_t>(rank_)] = mine->data();
  // Round 1: each rank's name through its slot. The peers read it before arriving at round 2.
  const uint64_t k = begin_round("allocate_symmetric", deadline, 2);
  std::memcpy(slot(rank_, k), mine->name().c_str(), mine->name().size() + 1);
  arrive_and_wait(k, "allocate_symmetric", deadline);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const char* name = slot(p, k);
    buffer->peer_mappings.push_back(detail::ShmSegment::open(std::string(name, strnlen(name, kMaxNameBytes)), mapped));
    buffer->base[static_cast<size_t>(p)] = buffer->peer_mappings.back().data();
  }
  // Round 2: every rank has mapped every buffer, so the names can go (UnlinkOnExit).
  arrive_and_wait(round_++, "allocate_symmetric", deadline);
  symmetric_->add(buffer);

  // The memory stays mapped while the caller holds it; the registry forgets it then (if the
  // communicator still exists), so a later buffer at the same address is not taken for it.
  std::weak_ptr<detail::SymmetricRegistry> registry = symmetric_;
  const uint64_t id = buffer->id;
  char* data = mine->data();
  return std::shared_ptr<void>(data, [registry, id, mine](void*) mutable {
    if (auto r = registry.lock()) r->remove(id);
    mine.reset();
  });
}

}  // namespace tessera::dist
