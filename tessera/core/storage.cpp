#include "tessera/core/storage.h"

#include <cstdlib>
#include <new>

#include "tessera/core/cpu_allocator.h"
#include "tessera/core/error.h"

namespace tessera {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (!device.is_cpu())
    throw NotSupportedError("[Storage::allocate] device " + device.str() +
                            " is not available in this build (CPU only)");
  return std::shared_ptr<Storage>(new Storage(cpu_allocator::allocate(nbytes), nbytes, device));
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, std::function<void()> release) {
  if (!device.is_cpu())
    throw NotSupportedError("[Storage::wrap] device " + device.str() + " is not available in this build (CPU only)");
  auto storage = std::shared_ptr<Storage>(new Storage(data, nbytes, device));
  storage->external_release_ = std::move(release);
  return storage;
}

Storage::~Storage() {
  if (external_release_) {
    external_release_();
    return;
  }
  if (data_ != nullptr) cpu_allocator::deallocate(data_, nbytes_);
}

void Storage::release_memory() {
  if (data_ == nullptr) return;
  if (external_release_)
    throw NotSupportedError("[Storage::release_memory] this tensor views memory tessera does not own "
                            "(a NumPy array): it cannot be freed and re-allocated; clone() it first");
  cpu_allocator::deallocate(data_, nbytes_);
  data_ = nullptr;
}

void Storage::restore_memory() {
  if (data_ == nullptr && nbytes_ > 0) data_ = cpu_allocator::allocate(nbytes_);
}

}  // namespace tessera
