// Where a tensor's memory comes from: one allocator per device type, which Storage asks. The CPU's is
// cpu_allocator.h (large blocks cached by size, a memory budget); a device's comes from its backend
// (backend/cuda/allocator.h), and in a build without that backend asking for it is an error that says
// why. So a new device is an allocator and a kernel table, never an edit to Storage or Tensor.
#pragma once
#include <cstddef>

#include "tessera/core/device.h"

namespace tessera {

struct AllocatorStats {
  size_t allocated = 0;       // bytes held by live tensors now
  size_t peak_allocated = 0;  // the most since the last reset
  size_t reserved = 0;        // allocated plus what the allocator keeps cached for reuse
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // `nbytes` on `device`; nullptr only for 0. Throws OutOfMemoryError naming the request and the
  // allocator's figures (Tensor::empty adds the tensor's shape).
  virtual void* allocate(size_t nbytes, Device device) = 0;
  // Gives back what allocate returned, with the same size and device.
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
  virtual AllocatorStats stats(Device device) const = 0;
  virtual void reset_peak(Device device) = 0;
  // Returns every cached free block to the system (or driver).
  virtual void empty_cache() = 0;
};

// The allocator of `device`'s type. NotSupportedError, naming the device and the reason, where this
// build or machine has none (a CPU-only build asked for cuda:0).
Allocator& allocator_for(Device device);

}  // namespace tessera
