// CUDA streams and events behind core/stream.h: each device's compute stream (one per device, made
// on first use and kept for the process), and events recorded on any stream. The communicator's
// stream (NCCL, CUDA-IPC) waits on an event of the compute stream instead of the host waiting.
#pragma once
#include <memory>

#include "tessera/core/stream.h"

namespace tessera::cuda {

// The compute stream of cuda:`device` (a non-blocking CUDA stream: it does not wait for the legacy
// default stream).
Stream& compute_stream(int device);
// A new non-blocking stream on cuda:`device` (a communicator's own).
std::unique_ptr<Stream> make_stream(int device);

}  // namespace tessera::cuda
