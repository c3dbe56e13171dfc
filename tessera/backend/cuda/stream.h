// CUDA streams and events behind core/stream.h: each device's compute stream, and events recorded on
// any stream. The communicator's
// stream (NCCL, CUDA-IPC) waits on an event of the compute stream instead of the host waiting.
#pragma once
#include <memory>

#include "tessera/core/stream.h"

namespace tessera::cuda {

// The compute stream of cuda:`device`: the device's legacy default stream, which the backend's
// copies, kernels and cuBLASLt calls are issued to (as PyTorch's default stream), so they are
// ordered with each other without events.
Stream& compute_stream(int device);
// A new non-blocking stream on cuda:`device` (a communicator's own).
std::unique_ptr<Stream> make_stream(int device);

}  // namespace tessera::cuda
