// Row kernels of the CUDA backend (elementwise.h, nn_kernels.h): sums, the sum of squares, softmax
// and attention's weights with their backward. One block of 256 threads per row: each thread strides
// over the row, then the block reduces in shared memory (launch.cuh). Rows of the sizes tessera
// trains (up to tens of thousands of columns) fit this shape; a row longer than a block's patience
// still comes out right, only slower.
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <vector>

#include "tessera/backend/cuda/cuda_check.h"
#include "tessera/backend/cuda/elementwise.h"
#include "tessera/backend/cuda/launch.cuh"
#include "tessera/backend/cuda/nn_kernels.h"

namespace tessera::cuda {
namespace {

__global__ void sum_rows_kernel(const float* __restrict__ in, int64_t cols, float* __restrict__ out) {
  __shared__ float scratch[kRowThreads];
  const float* row = in + static_cast<int64_t>(blockIdx.x) * cols;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) s += row[c];
  s = block_reduce(s, scratch, Add{});
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

__global__ void squared_norm_kernel(const float* __restrict__ in, int64_t n, double* __restrict__ partial) {
  __shared__ double scratch[kRowThreads];
  double s = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kRowThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kRowThreads)
    s += static_cast<double>(in[i]) * in[i];
  s = block_reduce(s, scratch, Add{});
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// A NaN anywhere makes the row NaN, as the CPU's libm path does (fmaxf would skip it).
__global__ void softmax_kernel(const float* __restrict__ in, int64_t cols, bool log_space, float* __restrict__ out) {
  __shared__ float scratch[kRowThreads];
  const float* x = in + static_cast<int64_t>(blockIdx.x) * cols;
  float* y = out + static_cast<int64_t>(blockIdx.x) * cols;
  float mx = -FLT_MAX, nan = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    mx = fmaxf(mx, x[c]);
    if (isnan(x[c])) nan = 1.0f;
  }
  mx = block_reduce(mx, scratch, Max{});
  nan = block_reduce(nan, scratch, Max{});
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) s += expf(x[c] - mx);
  s = block_reduce(s, scratch, Add{});
  const float lse = mx + logf(s), inv = 1.0f / s;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    const float v = log_space ? x[c] - lse : expf(x[c] - mx) * inv;
    y[c] = nan != 0.0f ? NAN : v;
  }
}

__global__ void softmax_backward_kernel(const float* __restrict__ out, const float* __restrict__ grad, int64_t cols,
                                        bool log_space, float* __restrict__ grad_in) {
  __shared__ float scratch[kRowThreads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) s += log_space ? grad[base + c] : grad[base + c] * out[base + c];
  s = block_reduce(s, scratch, Add{});
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    const float y = out[base + c], g = grad[base + c];
    grad_in[base + c] = log_space ? g - expf(y) * s : y * (g - s);
  }
}

// How many keys attention's row m sees (cpu_rows.cpp's VisibleKeys).
__device__ __forceinline__ int64_t visible_keys(int64_t m, int64_t Tq, int64_t Tk, bool causal) {
  if (!causal) return Tk;
  const int64_t n = m % Tq + (Tk - Tq) + 1;
  return n < 0 ? 0 : n > Tk ? Tk : n;
}

// cpu_rows.cpp's attention_weights. The scaled score is rounded before the maximum is subtracted
// (__fmul_rn is never fused into an FMA), as the CPU's pass through the output row rounds it. A NaN,
// an infinite maximum or no visible key makes the whole row NaN, which is what the CPU's libm path
// gives in each of those cases (an exponential of NaN or of inf - inf reaches every element through
// the sum). The branch is the block's (mx and nan are the block's reductions), so no thread is left
// waiting at a barrier.
__global__ void attention_kernel(const float* __restrict__ in, int64_t first_row, int64_t Tq, int64_t Tk, float scale,
                                 bool causal, float* __restrict__ out) {
  __shared__ float scratch[kRowThreads];
  const int64_t m = first_row + blockIdx.x;
  const float* x = in + m * Tk;
  float* y = out + m * Tk;
  const int64_t n = visible_keys(m, Tq, Tk, causal);
  float mx = -INFINITY, nan = 0.0f;
  for (int64_t c = threadIdx.x; c < n; c += kRowThreads) {
    const float v = __fmul_rn(x[c], scale);
    mx = fmaxf(mx, v);
    if (isnan(v)) nan = 1.0f;
  }
  mx = block_reduce(mx, scratch, Max{});
  nan = block_reduce(nan, scratch, Max{});
  if (nan != 0.0f || isinf(mx)) {
    for (int64_t c = threadIdx.x; c < Tk; c += kRowThreads) y[c] = NAN;
    return;
  }
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < n; c += kRowThreads) s += expf(__fmul_rn(x[c], scale) - mx);
  s = block_reduce(s, scratch, Add{});
  const float inv = 1.0f / s;
  for (int64_t c = threadIdx.x; c < Tk; c += kRowThreads) y[c] = c < n ? expf(__fmul_rn(x[c], scale) - mx) * inv : 0.0f;
}

// softmax's backward over the whole row (the masked weights are 0 and add nothing but a NaN or inf
// gradient there, as on the CPU), times the scale; 0 at the masked keys.
__global__ void attention_backward_kernel(const float* __restrict__ out, const float* __restrict__ grad,
                                          int64_t first_row, int64_t Tq, int64_t Tk, float scale, bool causal,
                                          float* __restrict__ grad_in) {
  __shared__ float scratch[kRowThreads];
  const int64_t m = first_row + blockIdx.x;
  const int64_t base = m * Tk, n = visible_keys(m, Tq, Tk, causal);
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < Tk; c += kRowThreads) s += grad[base + c] * out[base + c];
  s = block_reduce(s, scratch, Add{});
  for (int64_t c = threadIdx.x; c < Tk; c += kRowThreads)
    grad_in[base + c] = c < n ? out[base + c] * (grad[base + c] - s) * scale : 0.0f;
}

}  // namespace

void sum_rows(int device, const float* in, int64_t rows, int64_t cols, float* out) {
  if (rows == 0) return;
  detail::use_device(device, "cuda::sum_rows");
  for (int64_t r = 0; r < rows; r += kMaxRowsPerLaunch) {
    const int64_t count = std::min(rows - r, kMaxRowsPerLaunch);
    sum_rows_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(in + r * cols, cols, out + r);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

double squared_norm(int device, const float* in, int64_t n, double* partial) {
  if (n == 0) return 0.0;
  detail::use_device(device, "cuda::squared_norm");
  const int blocks = static_cast<int>(std::min<int64_t>((n + kRowThreads - 1) / kRowThreads, kSquaredNormBlocks));
  squared_norm_kernel<<<blocks, kRowThreads>>>(in, n, partial);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  std::vector<double> host(static_cast<size_t>(blocks));
  TESSERA_CUDA_CHECK(cudaMemcpy(host.data(), partial, sizeof(double) * host.size(), cudaMemcpyDeviceToHost));
  double s = 0.0;
  for (double p : host) s += p;  // in block order: the same sum on every run
  return s;
}

void softmax_rows(int device, const float* in, int64_t rows, int64_t cols, bool log_space, float* out) {
  if (rows == 0 || cols == 0) return;
  detail::use_device(device, "cuda::softmax_rows");
  for (int64_t r = 0; r < rows; r += kMaxRowsPerLaunch) {
    const int64_t count = std::min(rows - r, kMaxRowsPerLaunch);
    softmax_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(in + r * cols, cols, log_space, out + r * cols);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void softmax_rows_backward(int device, const float* out, const float* grad, int64_t rows, int64_t cols, bool log_space,
                           float* grad_in) {
  if (rows == 0 || cols == 0) return;
  detail::use_device(device, "cuda::softmax_rows_backward");
  for (int64_t r = 0; r < rows; r += kMaxRowsPerLaunch) {
    const int64_t count = std::min(rows - r, kMaxRowsPerLaunch);
    softmax_backward_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(out + r * cols, grad + r * cols, cols,
                                                                           log_space, grad_in + r * cols);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void attention_rows(int device, const float* scores, int64_t rows, int64_t Tq, int64_t Tk, float scale, bool causal,
                    float* out) {
  if (rows == 0 || Tk == 0) return;
  detail::use_device(device, "cuda::attention_rows");
  for (int64_t r = 0; r < rows; r += kMaxRowsPerLaunch) {
    const int64_t count = std::min(rows - r, kMaxRowsPerLaunch);
    attention_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(scores, r, Tq, Tk, scale, causal, out);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void attention_rows_backward(int device, const float* out, const float* grad, int64_t rows, int64_t Tq, int64_t Tk,
                             float scale, bool causal, float* grad_in) {
  if (rows == 0 || Tk == 0) return;
  detail::use_device(device, "cuda::attention_rows_backward");
  for (int64_t r = 0; r < rows; r += kMaxRowsPerLaunch) {
    const int64_t count = std::min(rows - r, kMaxRowsPerLaunch);
    attention_backward_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(out, grad, r, Tq, Tk, scale, causal,
                                                                             grad_in);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::cuda
