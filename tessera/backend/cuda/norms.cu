// Layer and batch normalisation on the device (nn_kernels.h; cpu_rows.cpp's layer_norm, batch_norm
// and their backward). Launch shapes:
//   layer norm:  a block per row for the statistics, the output and the input's gradient; the
//                weight's and bias's gradients, column sums over the rows, in two passes with no
//                atomics: a thread per (column, chunk of rows) sums its chunk in row order, then a
//                thread per column sums the chunks in order. The same bits on every run.
//   batch norm:  a block per channel for the statistics (in double, as the CPU's) and for the
//                gradient sums; a thread per element for the output and the input's gradient.
// A channel's elements are N runs of S apart by C · S: a thread strides over the channel's N · S
// elements as one flat range, so that small S (a (N, C) batch) still keeps the block busy.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tessera/backend/cuda/cuda_check.h"
#include "tessera/backend/cuda/launch.cuh"
#include "tessera/backend/cuda/nn_kernels.h"

namespace tessera::cuda {
namespace {

__global__ void layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ b, int64_t first_row, int64_t D, float eps,
                                  float* __restrict__ out, float* __restrict__ stats) {
  __shared__ float scratch[kRowThreads];
  const int64_t m = first_row + blockIdx.x;
  const float* r = x + m * D;
  float* o = out + m * D;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += kRowThreads) s += r[i];
  const float mu = block_reduce(s, scratch, Add{}) / static_cast<float>(D);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += kRowThreads) {
    const float d = r[i] - mu;
    ss += d * d;
  }
  const float var = block_reduce(ss, scratch, Add{}) / static_cast<float>(D);
  const float rstd = 1.0f / sqrtf(var + eps);
  if (threadIdx.x == 0) {
    stats[2 * m] = mu;
    stats[2 * m + 1] = rstd;
  }
  for (int64_t i = threadIdx.x; i < D; i += kRowThreads)
    o[i] = (r[i] - mu) * rstd * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
}

// dx = rstd (g w - mean(g w) - x̂ mean(g w x̂)), x̂ = (x - mean) rstd.
__global__ void layer_norm_backward_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                           const float* __restrict__ stats, const float* __restrict__ g,
                                           int64_t first_row, int64_t D, float* __restrict__ dx) {
  __shared__ float scratch[kRowThreads];
  const int64_t m = first_row + blockIdx.x;
  const float mu = stats[2 * m], rstd = stats[2 * m + 1];
  const float* r = x + m * D;
  const float* gr = g + m * D;
  float* d = dx + m * D;
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += kRowThreads) {
    const float gh = gr[i] * (w ? w[i] : 1.0f);
    sum_g += gh;
    sum_gx += gh * ((r[i] - mu) * rstd);
  }
  const float mean_g = block_reduce(sum_g, scratch, Add{}) / static_cast<float>(D);
  const float mean_gx = block_reduce(sum_gx, scratch, Add{}) / static_cast<float>(D);
  for (int64_t i = threadIdx.x; i < D; i += kRowThreads) {
    const float gh = gr[i] * (w ? w[i] : 1.0f), xhat = (r[i] - mu) * rstd;
    d[i] = rstd * (gh - mean_g - xhat * mean_gx);
  }
}

// Pass 1 of the weight's and bias's gradients: grid (column blocks, chunks); the thread of column i
// and chunk k sums rows [k · per_chunk, (k + 1) · per_chunk) in order into partial[k, i] (weight)
// and partial[chunks + k, i] (bias).
__global__ void layer_norm_columns_kernel(const float* __restrict__ x, const float* __restrict__ stats,
                                          const float* __restrict__ g, int64_t rows, int64_t D, int64_t per_chunk,
                                          float* __restrict__ partial) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= D) return;
  const int64_t k = blockIdx.y, chunks = gridDim.y;
  const int64_t begin = k * per_chunk, end = begin + per_chunk < rows ? begin + per_chunk : rows;
  float dw = 0.0f, db = 0.0f;
  for (int64_t m = begin; m < end; ++m) {
    const float gv = g[m * D + i];
    dw += gv * ((x[m * D + i] - stats[2 * m]) * stats[2 * m + 1]);
    db += gv;
  }
  partial[k * D + i] = dw;
  partial[(chunks + k) * D + i] = db;
}

// Pass 2: each column's chunks added in order.
__global__ void layer_norm_columns_total_kernel(const float* __restrict__ partial, int64_t D, int64_t chunks,
                                                float* __restrict__ dw, float* __restrict__ db) {
  for (int64_t i = first_index(); i < D; i += grid_stride()) {
    float sw = 0.0f, sb = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) {
      sw += partial[k * D + i];
      sb += partial[(chunks + k) * D + i];
    }
    if (dw) dw[i] = sw;
    if (db) db[i] = sb;
  }
}

// Element e of channel c's N · S: sample e / S, position e % S.
__device__ __forceinline__ int64_t channel_offset(int64_t e, int64_t c, int64_t C, int64_t S) {
  const int64_t n = e / S;
  return (n * C + c) * S + (e - n * S);
}

// A block per channel: the mean and variance in double (the CPU's sums), the running statistics'
// update in training, or the running statistics read in evaluation; stats[c] = (mean, 1/std).
__global__ void batch_norm_stats_kernel(const float* __restrict__ x, int64_t N, int64_t C, int64_t S,
                                        float* running_mean, int64_t mean_stride, float* running_var,
                                        int64_t var_stride, bool training, float momentum, float eps,
                                        int64_t first_channel, float* __restrict__ stats) {
  __shared__ double scratch[kRowThreads];
  const int64_t c = first_channel + blockIdx.x;
  float mu, var;
  if (training) {  // the block's branch: every thread takes it or none
    const int64_t count = N * S;
    double s = 0.0;
    for (int64_t e = threadIdx.x; e < count; e += kRowThreads) s += x[channel_offset(e, c, C, S)];
    s = block_reduce(s, scratch, Add{});
    mu = static_cast<float>(s / static_cast<double>(count));
    double ss = 0.0;
    for (int64_t e = threadIdx.x; e < count; e += kRowThreads) {
      const float d = x[channel_offset(e, c, C, S)] - mu;
      ss += d * d;
    }
    ss = block_reduce(ss, scratch, Add{});
    var = static_cast<float>(ss / static_cast<double>(count));
    if (threadIdx.x == 0) {
      if (running_mean) {
        float* rm = running_mean + c * mean_stride;
        *rm = (1.0f - momentum) * *rm + momentum * mu;
      }
      if (running_var) {
        float* rv = running_var + c * var_stride;
        *rv = (1.0f - momentum) * *rv + momentum * static_cast<float>(ss / static_cast<double>(count - 1));
      }
    }
  } else {
    mu = running_mean[c * mean_stride];
    var = running_var[c * var_stride];
  }
  if (threadIdx.x == 0) {
    stats[2 * c] = mu;
    stats[2 * c + 1] = 1.0f / sqrtf(var + eps);
  }
}

__global__ void batch_norm_output_kernel(const float* __restrict__ x, const float* __restrict__ stats,
                                         const float* __restrict__ w, const float* __restrict__ b, int64_t C,
                                         int64_t S, int64_t total, float* __restrict__ out) {
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t c = (e / S) % C;
    const float scale = stats[2 * c + 1] * (w ? w[c] : 1.0f);
    const float shift = (b ? b[c] : 0.0f) - stats[2 * c] * scale;
    out[e] = x[e] * scale + shift;
  }
}

// A block per channel: Σ g and Σ g x̂ in double, stored as floats (the bias's and weight's
// gradients, which the input's gradient reads, as the CPU's does).
__global__ void batch_norm_sums_kernel(const float* __restrict__ x, const float* __restrict__ stats,
                                       const float* __restrict__ g, int64_t N, int64_t C, int64_t S,
                                       int64_t first_channel, float* __restrict__ gw, float* __restrict__ gb) {
  __shared__ double scratch[kRowThreads];
  const int64_t c = first_channel + blockIdx.x, count = N * S;
  const float mu = stats[2 * c], rstd = stats[2 * c + 1];
  double sum_g = 0.0, sum_gx = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += kRowThreads) {
    const int64_t k = channel_offset(e, c, C, S);
    sum_g += g[k];
    sum_gx += g[k] * (x[k] - mu) * rstd;
  }
  sum_g = block_reduce(sum_g, scratch, Add{});
  sum_gx = block_reduce(sum_gx, scratch, Add{});
  if (threadIdx.x == 0) {
    gw[c] = static_cast<float>(sum_gx);
    gb[c] = static_cast<float>(sum_g);
  }
}

__global__ void batch_norm_backward_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                           const float* __restrict__ stats, const float* __restrict__ g,
                                           const float* __restrict__ gw, const float* __restrict__ gb, int64_t C,
                                           int64_t S, int64_t total, float count, bool training,
                                           float* __restrict__ dx) {
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t c = (e / S) % C;
    const float mu = stats[2 * c], rstd = stats[2 * c + 1], wc = w ? w[c] : 1.0f;
    if (training) {
      const float xhat = (x[e] - mu) * rstd;
      dx[e] = wc * rstd * (g[e] - gb[c] / count - xhat * gw[c] / count);
    } else {
      dx[e] = g[e] * wc * rstd;
    }
  }
}

}  // namespace

void layer_norm_rows(int device, const float* x, const float* weight, const float* bias, int64_t rows, int64_t D,
                     float eps, float* out, float* stats) {
  if (rows == 0 || D == 0) return;
  detail::use_device(device, "cuda::layer_norm_rows");
  for (int64_t r = 0; r < rows; r += kMaxRowsPerLaunch) {
    const int64_t count = std::min(rows - r, kMaxRowsPerLaunch);
    layer_norm_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(x, weight, bias, r, D, eps, out, stats);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void layer_norm_rows_backward(int device, const float* x, const float* weight, const float* stats, const float* grad,
                              int64_t rows, int64_t D, float* grad_x, float* grad_weight, float* grad_bias,
                              float* partial) {
  if (D == 0) return;
  detail::use_device(device, "cuda::layer_norm_rows_backward");
  for (int64_t r = 0; r < rows; r += kMaxRowsPerLaunch) {
    const int64_t count = std::min(rows - r, kMaxRowsPerLaunch);
    layer_norm_backward_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(x, weight, stats, grad, r, D, grad_x);
  }
  if (grad_weight || grad_bias) {
    const int64_t chunks = layer_norm_row_chunks(rows);
    const int64_t per_chunk = rows == 0 ? 1 : (rows + chunks - 1) / chunks;
    const dim3 grid(static_cast<unsigned>((D + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
    layer_norm_columns_kernel<<<grid, kThreads>>>(x, stats, grad, rows, D, per_chunk, partial);
    layer_norm_columns_total_kernel<<<blocks_for(D), kThreads>>>(partial, D, chunks, grad_weight, grad_bias);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void batch_norm_channels(int device, const float* x, int64_t N, int64_t C, int64_t S, float* running_mean,
                         int64_t mean_stride, float* running_var, int64_t var_stride, const float* weight,
                         const float* bias, bool training, float momentum, float eps, float* out, float* stats) {
  if (C == 0) return;
  detail::use_device(device, "cuda::batch_norm_channels");
  for (int64_t c = 0; c < C; c += kMaxRowsPerLaunch) {
    const int64_t count = std::min(C - c, kMaxRowsPerLaunch);
    batch_norm_stats_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(
        x, N, C, S, running_mean, mean_stride, running_var, var_stride, training, momentum, eps, c, stats);
  }
  const int64_t total = N * C * S;
  if (total > 0) batch_norm_output_kernel<<<blocks_for(total), kThreads>>>(x, stats, weight, bias, C, S, total, out);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void batch_norm_channels_backward(int device, const float* x, const float* weight, const float* stats,
                                  const float* grad, int64_t N, int64_t C, int64_t S, bool training, float* grad_x,
                                  float* grad_weight, float* grad_bias) {
  if (C == 0) return;
  detail::use_device(device, "cuda::batch_norm_channels_backward");
  for (int64_t c = 0; c < C; c += kMaxRowsPerLaunch) {
    const int64_t count = std::min(C - c, kMaxRowsPerLaunch);
    batch_norm_sums_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(x, stats, grad, N, C, S, c, grad_weight,
                                                                          grad_bias);
  }
  const int64_t total = N * C * S;
  if (total > 0)
    batch_norm_backward_kernel<<<blocks_for(total), kThreads>>>(x, weight, stats, grad, grad_weight, grad_bias, C, S,
                                                                total, static_cast<float>(N * S), training, grad_x);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::cuda
