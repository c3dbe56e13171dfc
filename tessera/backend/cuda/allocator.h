// The CUDA backend's tensor allocator (core/allocator.h), which Storage asks for memory on cuda:N.
// cudaMalloc and cudaFree synchronize the device and cost tens of microseconds to milliseconds each,
// and a training step allocates the same sizes every iteration, so memory is cached: a BlockPool per
// device (core/block_pool.h, as PyTorch's CUDACachingAllocator) takes segments from cudaMalloc,
// hands out the best-fitting free block, split when the rest is worth keeping, and merges freed
// neighbours; requests under 1 MiB come from 2 MiB segments of their own. Statistics: allocated,
// peak, reserved. TESSERA_CUDA_MEMORY_FRACTION caps what a device's pool may reserve. Every tensor's
// work runs on one stream per device (the compute stream), so a freed block may be reused at once:
// later work on that stream is ordered after the work that used it. When tensors live on other
// streams, a block freed on one will wait for an event before another reuses it.
//
// Out of memory: the pool releases its cached segments and tries once more; then OutOfMemoryError
// names the request, the bytes allocated, reserved and cached, the device's free memory and the cap.
#pragma once
#include "tessera/core/allocator.h"

namespace tessera::cuda {

// NotSupportedError naming the reason in a build without CUDA.
Allocator& tensor_allocator();

}  // namespace tessera::cuda
