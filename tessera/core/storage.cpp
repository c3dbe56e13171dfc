#include "tessera/core/storage.h"

#include <cstdlib>
#include <new>

#include "tessera/core/allocator.h"
#include "tessera/core/error.h"

namespace tessera {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  return std::shared_ptr<Storage>(new Storage(allocator_for(device).allocate(nbytes, device), nbytes, device));
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, std::function<void()> release) {
  if (!device.is_cpu())
    throw NotSupportedError("[Storage::wrap] only host memory can be wrapped, not " + device.str() + "'s");
  auto storage = std::shared_ptr<Storage>(new Storage(data, nbytes, device));
  storage->external_release_ = std::move(release);
  return storage;
}

Storage::~Storage() {
  if (external_release_) {
    external_release_();
    return;
  }
  if (data_ != nullptr) allocator_for(device_).deallocate(data_, nbytes_, device_);
}

void Storage::release_memory() {
  if (data_ == nullptr) return;
  if (external_release_)
    throw NotSupportedError("[Storage::release_memory] this tensor views memory tessera does not own "
                            "(a NumPy array): it cannot be freed and re-allocated; clone() it first");
  allocator_for(device_).deallocate(data_, nbytes_, device_);
  data_ = nullptr;
}

void Storage::restore_memory() {
  if (data_ == nullptr && nbytes_ > 0) data_ = allocator_for(device_).allocate(nbytes_, device_);
}

}  // namespace tessera
