#include "tessera/core/storage.h"

#include <cstdlib>
#include <new>

#include "tessera/core/error.h"

namespace tessera {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (!device.is_cpu())
    throw NotSupportedError("[Storage::allocate] device " + device.str() +
                            " is not available in this build (CPU only)");
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = rounded == 0 ? nullptr : std::aligned_alloc(kAlignment, rounded);
  if (rounded != 0 && p == nullptr)
    throw Error(detail::concat("[Storage::allocate] out of memory allocating ", nbytes, " bytes"));
  return std::shared_ptr<Storage>(new Storage(p, nbytes, device));
}

Storage::~Storage() { std::free(data_); }

}  // namespace tessera
