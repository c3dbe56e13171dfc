// The vocabulary of the communication layer: reduction ops, the byte buffers collectives move, and
// the deadline every blocking call carries. Backends (communicator.h) see only these, never tensors.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/dist/net/deadline.h"
#include "tessera/dist/store/store.h"

namespace tessera::dist {

enum class ReduceOp : uint8_t { Sum, Avg, Max, Min };
const char* reduce_op_name(ReduceOp op);

using Deadline = detail::Clock::time_point;

// A contiguous run of `count` elements of `dtype` in this process's memory: host memory, or a
// device's (then `data` is a device address, never read on the host; only a backend that takes that
// device, Communicator::takes, is given it). Inputs and outputs use the same type; a collective
// documents which it reads and which it writes.
struct Buffer {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::Float32;
  Device device = cpu_device();

  size_t nbytes() const { return static_cast<size_t>(count) * dtype_size(dtype); }
  // Elements [offset, offset + n).
  Buffer slice(int64_t offset, int64_t n) const {
    return Buffer{static_cast<char*>(data) + static_cast<size_t>(offset) * dtype_size(dtype), n, dtype, device};
  }
  template <typename T> T* as() const { return static_cast<T*>(data); }
};

// out[i] = op(out[i], in[i]) for `count` elements: the one reduction kernel every backend shares
// (vectorised by the compiler for float32 and int64; bfloat16 accumulates through float32).
// Avg is not a kernel: callers sum and then scale (scale_in_place).
void reduce_into(void* out, const void* in, int64_t count, DType dtype, ReduceOp op);
// out[i] = op(a[i], b[i]); out may alias a or b.
void reduce_pair(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op);
// data[i] /= divisor, for Avg. int64 divides with truncation, as PyTorch's integer division does.
void divide_in_place(Buffer data, int64_t divisor);

}  // namespace tessera::dist
