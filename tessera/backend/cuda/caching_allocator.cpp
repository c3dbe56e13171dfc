// The CUDA tensor allocator: a BlockPool per device (core/block_pool.h: segments from cudaMalloc,
// best fit, blocks split and merged, small requests apart), behind the Allocator interface Storage
// asks; backend/cuda/allocator.h says the policy and why.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tessera/backend/cuda/allocator.h"
#include "tessera/backend/cuda/cuda_check.h"
#include "tessera/backend/cuda/device_info.h"
#include "tessera/core/block_pool.h"
#include "tessera/util/settings.h"

namespace tessera::cuda {
namespace {

// TESSERA_CUDA_MEMORY_FRACTION (0 < f <= 1): the share of the device's memory the pool may reserve,
// as PyTorch's set_per_process_memory_fraction; unset: no cap beyond the device's own.
double memory_fraction() {
  const char* text = env_setting("TESSERA_CUDA_MEMORY_FRACTION");
  if (text == nullptr || *text == '\0') return 0.0;
  char* end = nullptr;
  const double f = std::strtod(text, &end);
  TESSERA_CHECK(end != text && *end == '\0' && f > 0.0 && f <= 1.0, "[TESSERA_CUDA_MEMORY_FRACTION] expected a "
                "number in (0, 1], got '", text, "'");
  return f;
}

// A segment from the driver, or nullptr when the device is out of memory (other errors throw).
void* reserve_on(int device, size_t bytes) {
  TESSERA_CUDA_CHECK(cudaSetDevice(device));
  void* segment = nullptr;
  const cudaError_t error = cudaMalloc(&segment, bytes);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: the pool releases its cache and tries again, or reports
    return nullptr;
  }
  TESSERA_CUDA_CHECK(error);
  return segment;
}

std::unique_ptr<BlockPool> make_pool(int device) {
  BlockPool::Source source;
  source.reserve = [device](size_t bytes) { return reserve_on(device, bytes); };
  source.release = [device](void* segment, size_t) {
    TESSERA_CUDA_CHECK(cudaSetDevice(device));
    TESSERA_CUDA_CHECK(cudaFree(segment));
  };
  if (const double fraction = memory_fraction(); fraction > 0.0) {
    size_t free_bytes = 0, total_bytes = 0;
    TESSERA_CUDA_CHECK(cudaSetDevice(device));
    TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    source.limit = static_cast<size_t>(fraction * static_cast<double>(total_bytes));
  }
  return std::make_unique<BlockPool>(std::move(source));
}

class CachingCudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    if (nbytes == 0) return nullptr;
    check_device(device);
    std::lock_guard lock(mutex_);
    BlockPool& pool = pool_of(device.index);
    void* block = pool.allocate(nbytes);
    if (block == nullptr) throw out_of_memory(nbytes, device, pool);
    return block;
  }

  void deallocate(void* ptr, size_t, Device device) override {
    if (ptr == nullptr) return;
    std::lock_guard lock(mutex_);
    // Every tensor's work runs on the device's one compute stream, so the block may be reused at
    // once: later work on that stream is ordered after the work that used it.
    pool_of(device.index).free(ptr);
  }

  AllocatorStats stats(Device device) const override {
    std::lock_guard lock(mutex_);
    auto it = pools_.find(device.index);
    if (it == pools_.end()) return {};
    const BlockPool::Stats& s = it->second->stats();
    return AllocatorStats{s.allocated, s.peak_allocated, s.reserved};
  }

  void reset_peak(Device device) override {
    std::lock_guard lock(mutex_);
    pool_of(device.index).reset_peak();
  }

  void empty_cache() override {
    std::lock_guard lock(mutex_);
    for (auto& [index, pool] : pools_) pool->release_cached();
  }

 private:
  static void check_device(Device device) {
    if (device.type != DeviceType::CUDA)
      throw InternalError("[cuda::tensor_allocator] asked for memory on " + device.str());
    detail::use_device(device.index, "cuda::tensor_allocator");
  }

  BlockPool& pool_of(int device) {  // mutex_ held
    std::unique_ptr<BlockPool>& pool = pools_[device];
    if (!pool) pool = make_pool(device);
    return *pool;
  }

  static OutOfMemoryError out_of_memory(size_t nbytes, Device device, const BlockPool& pool) {
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    cudaGetLastError();
    const BlockPool::Stats& s = pool.stats();
    const char* fraction = env_setting("TESSERA_CUDA_MEMORY_FRACTION");
    return OutOfMemoryError(tessera::detail::concat(
        "[cuda::tensor_allocator] cannot allocate ", nbytes, " bytes on ", device.str(), ": tensors hold ", s.allocated,
        " bytes, the allocator reserves ", s.reserved, " (", s.cached_blocks, " cached blocks), the device has ",
        free_bytes, " of ", total_bytes, " bytes free",
        fraction != nullptr ? tessera::detail::concat(", TESSERA_CUDA_MEMORY_FRACTION=", fraction) : std::string(),
        ". Free tensors or use a smaller batch"));
  }

  mutable std::mutex mutex_;
  std::map<int, std::unique_ptr<BlockPool>> pools_;
};

}  // namespace

Allocator& tensor_allocator() {
  // Never destroyed: tensors held by statics may be freed after the CUDA runtime has unloaded.
  static auto* allocator = new CachingCudaAllocator();
  return *allocator;
}

}  // namespace tessera::cuda
