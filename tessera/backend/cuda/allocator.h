// The CUDA backend's tensor allocator (core/allocator.h), which Storage asks for memory on cuda:N.
// It caches freed blocks by size class per device and reuses them, because cudaMalloc and cudaFree
// synchronize the device and cost tens of microseconds to milliseconds each, and a training step
// allocates the same sizes every iteration (PyTorch's CUDACachingAllocator, flashlight's
// CachingMemoryManager). Sizes round up to 512 bytes below 1 MiB and to 2 MiB above (the granularity
// cudaMalloc itself uses for large blocks), so a block is reused by any request of its class; it
// neither splits nor merges blocks yet. Every tensor's work runs on one stream per device (the
// default stream) for now, so a freed block may be reused at once: later work on that stream is
// ordered after the work that used it. When streams come, a block freed on one stream will wait for
// an event before another stream reuses it.
//
// Out of memory: the cache is emptied and cudaMalloc tried once more; then OutOfMemoryError names the
// request, the bytes allocated, reserved and free on the device.
#pragma once
#include "tessera/core/allocator.h"

namespace tessera::cuda {

// NotSupportedError naming the reason in a build without CUDA.
Allocator& tensor_allocator();

}  // namespace tessera::cuda
