#include "tessera/core/allocator.h"

#include "tessera/backend/cuda/allocator.h"
#include "tessera/core/cpu_allocator.h"

namespace tessera {
namespace {

// The CPU allocator's free functions behind the interface (device index ignored: one host).
class CpuTensorAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override { return cpu_allocator::allocate(nbytes); }
  void deallocate(void* ptr, size_t nbytes, Device) override { cpu_allocator::deallocate(ptr, nbytes); }
  AllocatorStats stats(Device) const override {
    const size_t allocated = cpu_allocator::allocated_bytes();
    return {allocated, cpu_allocator::peak_allocated_bytes(), allocated + cpu_allocator::cached_bytes()};
  }
  void reset_peak(Device) override { cpu_allocator::reset_peak_allocated_bytes(); }
  void empty_cache() override { cpu_allocator::empty_cache(); }
};

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.type == DeviceType::CPU) {
    static CpuTensorAllocator cpu;
    return cpu;
  }
  return cuda::tensor_allocator();  // the CUDA backend's, or no_cuda.cpp's error
}

}  // namespace tessera
