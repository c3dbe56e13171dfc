// The CUDA tensor allocator: backend/cuda/allocator.h says the policy and why.
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "tessera/backend/cuda/allocator.h"
#include "tessera/backend/cuda/cuda_check.h"
#include "tessera/backend/cuda/device_info.h"

namespace tessera::cuda {
namespace {

constexpr size_t kSmallGranularity = 512;         // cudaMalloc's own alignment
constexpr size_t kLargeThreshold = size_t{1} << 20;
constexpr size_t kLargeGranularity = size_t{2} << 20;

size_t size_class(size_t nbytes) {
  const size_t unit = nbytes < kLargeThreshold ? kSmallGranularity : kLargeGranularity;
  return (nbytes + unit - 1) / unit * unit;
}

struct DevicePool {
  std::map<size_t, std::vector<void*>> free_blocks;  // size class -> cached blocks
  AllocatorStats stats;
};

class CachingCudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    if (nbytes == 0) return nullptr;
    check_device(device);
    const size_t size = size_class(nbytes);
    std::lock_guard lock(mutex_);
    DevicePool& pool = pools_[device.index];
    void* block = nullptr;
    auto it = pool.free_blocks.find(size);
    if (it != pool.free_blocks.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
    } else {
      block = malloc_on(device, nbytes, size, pool);
    }
    pool.stats.allocated += size;
    pool.stats.peak_allocated = std::max(pool.stats.peak_allocated, pool.stats.allocated);
    return block;
  }

  void deallocate(void* ptr, size_t nbytes, Device device) override {
    if (ptr == nullptr) return;
    const size_t size = size_class(nbytes);
    std::lock_guard lock(mutex_);
    DevicePool& pool = pools_[device.index];
    pool.stats.allocated -= size;
    pool.free_blocks[size].push_back(ptr);  // reserved stays: the block is cached, not freed
  }

  AllocatorStats stats(Device device) const override {
    std::lock_guard lock(mutex_);
    auto it = pools_.find(device.index);
    return it == pools_.end() ? AllocatorStats{} : it->second.stats;
  }

  void reset_peak(Device device) override {
    std::lock_guard lock(mutex_);
    DevicePool& pool = pools_[device.index];
    pool.stats.peak_allocated = pool.stats.allocated;
  }

  void empty_cache() override {
    std::lock_guard lock(mutex_);
    for (auto& [index, pool] : pools_) release_cached(index, pool);
  }

 private:
  static void check_device(Device device) {
    if (device.type != DeviceType::CUDA)
      throw InternalError("[cuda::tensor_allocator] asked for memory on " + device.str());
    detail::use_device(device.index, "cuda::tensor_allocator");
  }

  // Frees every cached block of one device (mutex_ held).
  static void release_cached(int index, DevicePool& pool) {
    TESSERA_CUDA_CHECK(cudaSetDevice(index));
    for (auto& [size, blocks] : pool.free_blocks) {
      for (void* block : blocks) {
        TESSERA_CUDA_CHECK(cudaFree(block));
        pool.stats.reserved -= size;
      }
      blocks.clear();
    }
  }

  // A new block from the driver (mutex_ held); on failure the cache is emptied and it tries once more.
  static void* malloc_on(Device device, size_t nbytes, size_t size, DevicePool& pool) {
    void* block = nullptr;
    cudaError_t error = cudaMalloc(&block, size);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cached(device.index, pool);
      error = cudaMalloc(&block, size);
    }
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      throw OutOfMemoryError(tessera::detail::concat(
          "[cuda::tensor_allocator] cannot allocate ", nbytes, " bytes on ", device.str(), ": tensors hold ",
          pool.stats.allocated, " bytes, the allocator reserves ", pool.stats.reserved, ", the device has ", free_bytes,
          " of ", total_bytes, " bytes free. Free tensors or use a smaller batch"));
    }
    TESSERA_CUDA_CHECK(error);
    pool.stats.reserved += size;
    return block;
  }

  mutable std::mutex mutex_;
  std::map<int, DevicePool> pools_;
};

}  // namespace

Allocator& tensor_allocator() {
  // Never destroyed: tensors held by statics may be freed after the CUDA runtime has unloaded.
  static auto* allocator = new CachingCudaAllocator();
  return *allocator;
}

}  // namespace tessera::cuda
