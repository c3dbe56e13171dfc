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

Storage::~Storage() {
  if (data_ != nullptr) cpu_allocator::deallocate(data_, nbytes_);
}

void Storage::release_memory() {
  if (data_ == nullptr) return;
  cpu_allocator::deallocate(data_, nbytes_);
  data_ = nullptr;
}

void Storage::restore_memory() {
  if (data_ == nullptr && nbytes_ > 0) data_ = cpu_allocator::allocate(nbytes_);
}

}  // namespace tessera
