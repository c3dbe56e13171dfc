// Launch shapes and block reductions shared by the backend's .cu files (device code: included by
// them alone, never by a header the library's C++ sees). Two shapes serve every kernel here:
//   elementwise: kThreads threads per block, blocks_for(n) blocks, a grid-stride loop over n;
//   per row:     one block of kRowThreads threads per row (or channel), each thread striding over
//                the row, then block_reduce in shared memory. A grid holds at most
//                kMaxRowsPerLaunch blocks, so more rows go in several launches.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

namespace tessera::cuda {

constexpr int kThreads = 256;
constexpr int kRowThreads = 256;
constexpr int64_t kMaxRowsPerLaunch = 2147483647;  // gridDim.x's limit

inline unsigned blocks_for(int64_t n) {
  // Enough blocks to fill an H100's 132 SMs many times over; the grid-stride loop covers the rest.
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32)));
}

__device__ __forceinline__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(blockDim.x) * gridDim.x; }

// The block's reduction of `v` (every thread gets the result); `scratch` holds kRowThreads values.
// Every thread of the block must call it (it synchronises the block).
template <typename T, typename Op>
__device__ T block_reduce(T v, T* scratch, Op op) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) scratch[threadIdx.x] = op(scratch[threadIdx.x], scratch[threadIdx.x + half]);
    __syncthreads();
  }
  const T result = scratch[0];
  __syncthreads();
  return result;
}

struct Add {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
// fmaxf: a NaN operand is skipped (callers that must see NaN track it themselves).
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Min {
  template <typename T>
  __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};

}  // namespace tessera::cuda
