// Max and average pooling on the device (conv.h), one thread per output element forward and one per
// input element backward. The backward gathers: each input element adds the gradients of the
// windows that cover it, in window order, which is the order the CPU's scatter adds them in, so the
// sums are the CPU's bit for bit (max pooling) and no atomics make runs differ.
#include <cmath>
#include <cstdint>

#include "tessera/backend/cuda/conv.h"
#include "tessera/backend/cuda/cuda_check.h"
#include "tessera/backend/cuda/launch.cuh"

namespace tessera::cuda {
namespace {

__device__ __forceinline__ float relu_value(float v) { return v > 0.0f ? v : 0.0f; }  // NaN -> 0, as the CPU's

// The CPU's two loops (ops/conv.cpp, max_pool_planes) and their two rules, so that NaN and ties
// come out the same: the 2x2/stride-2 window replaces the best unless the next is <= it (a NaN
// replaces, and is replaced); any other window replaces on >, on NaN, or when nothing was taken.
__global__ void max_pool_kernel(PoolGeometry g, const float* __restrict__ x, bool relu_first, bool k2s2,
                                float* __restrict__ y, int64_t* __restrict__ argmax) {
  const int64_t total = g.N * g.C * g.OH * g.OW;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t ow = i % g.OW, oh = (i / g.OW) % g.OH, plane = i / (g.OW * g.OH);
    const float* in = x + plane * g.H * g.W;
    float best;
    int64_t arg;
    if (k2s2) {
      const int64_t top = 2 * oh * g.W + 2 * ow;
      const int64_t at[4] = {top, top + 1, top + g.W, top + g.W + 1};
      best = relu_first ? relu_value(in[at[0]]) : in[at[0]];
      arg = at[0];
      for (int k = 1; k < 4; ++k) {
        const float v = relu_first ? relu_value(in[at[k]]) : in[at[k]];
        if (!(v <= best)) {
          best = v;
          arg = at[k];
        }
      }
    } else {
      best = -INFINITY;
      arg = -1;
      for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
        const int64_t ih = oh * g.stride_h - g.pad_h + kh;
        if (ih < 0 || ih >= g.H) continue;
        for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
          const int64_t iw = ow * g.stride_w - g.pad_w + kw;
          if (iw < 0 || iw >= g.W) continue;
          const float v = relu_first ? relu_value(in[ih * g.W + iw]) : in[ih * g.W + iw];
          if (v > best || arg < 0 || isnan(v)) {
            best = v;
            arg = ih * g.W + iw;
          }
        }
      }
    }
    y[i] = best;
    argmax[i] = relu_first && !(best > 0.0f) ? -1 : arg;
  }
}

// The windows covering input row (or column) `i`: o from first to last inclusive (empty when last < first).
struct Covering {
  int64_t first, last;
};
__device__ __forceinline__ Covering covering(int64_t i, int64_t pad, int64_t kernel, int64_t stride, int64_t out) {
  // o covers i when o·stride - pad <= i < o·stride - pad + kernel.
  const int64_t hi = i + pad;  // o·stride <= hi
  const int64_t lo = hi - kernel + 1;  // o·stride >= lo
  const int64_t first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  const int64_t last = min(hi / stride, out - 1);
  return {first, last};
}

// `tiles`: 2x2/stride-2 windows over even sides cover every element once, and the CPU writes the
// gradient there rather than adding it to zero (the two differ for -0).
__global__ void max_pool_backward_kernel(PoolGeometry g, const float* __restrict__ dy, const int64_t* __restrict__ argmax,
                                         bool tiles, float* __restrict__ dx) {
  const int64_t total = g.N * g.C * g.H * g.W;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t iw = i % g.W, ih = (i / g.W) % g.H, plane = i / (g.W * g.H);
    const int64_t here = ih * g.W + iw;
    const Covering rows = covering(ih, g.pad_h, g.kernel_h, g.stride_h, g.OH);
    const Covering cols = covering(iw, g.pad_w, g.kernel_w, g.stride_w, g.OW);
    float sum = 0.0f;
    for (int64_t oh = rows.first; oh <= rows.last; ++oh)
      for (int64_t ow = cols.first; ow <= cols.last; ++ow) {
        const int64_t o = (plane * g.OH + oh) * g.OW + ow;
        if (argmax[o] == here) sum = tiles ? dy[o] : sum + dy[o];
      }
    dx[i] = sum;
  }
}

__global__ void avg_pool_kernel(PoolGeometry g, const float* __restrict__ x, float scale, float* __restrict__ y) {
  const int64_t total = g.N * g.C * g.OH * g.OW;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t ow = i % g.OW, oh = (i / g.OW) % g.OH, plane = i / (g.OW * g.OH);
    const float* in = x + plane * g.H * g.W;
    float sum = 0.0f;
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const int64_t ih = oh * g.stride_h - g.pad_h + kh;
      if (ih < 0 || ih >= g.H) continue;
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const int64_t iw = ow * g.stride_w - g.pad_w + kw;
        if (iw >= 0 && iw < g.W) sum += in[ih * g.W + iw] * scale;  // each term scaled, as the CPU adds them
      }
    }
    y[i] = sum;
  }
}

__global__ void avg_pool_backward_kernel(PoolGeometry g, const float* __restrict__ dy, float scale, float* __restrict__ dx) {
  const int64_t total = g.N * g.C * g.H * g.W;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t iw = i % g.W, ih = (i / g.W) % g.H, plane = i / (g.W * g.H);
    const Covering rows = covering(ih, g.pad_h, g.kernel_h, g.stride_h, g.OH);
    const Covering cols = covering(iw, g.pad_w, g.kernel_w, g.stride_w, g.OW);
    float sum = 0.0f;
    for (int64_t oh = rows.first; oh <= rows.last; ++oh)
      for (int64_t ow = cols.first; ow <= cols.last; ++ow) sum += dy[(plane * g.OH + oh) * g.OW + ow] * scale;
    dx[i] = sum;
  }
}

bool is_2x2_stride_2(const PoolGeometry& g) {
  return g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0;
}

float window_scale(const PoolGeometry& g) { return 1.0f / static_cast<float>(g.kernel_h * g.kernel_w); }

}  // namespace

void max_pool2d(int device, const PoolGeometry& g, const float* x, bool relu_first, float* y, int64_t* argmax) {
  const int64_t n = g.N * g.C * g.OH * g.OW;
  if (n == 0) return;
  detail::use_device(device, "cuda::max_pool2d");
  max_pool_kernel<<<blocks_for(n), kThreads>>>(g, x, relu_first, is_2x2_stride_2(g), y, argmax);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void max_pool2d_backward(int device, const PoolGeometry& g, const float* dy, const int64_t* argmax, float* dx) {
  const int64_t n = g.N * g.C * g.H * g.W;
  if (n == 0) return;
  detail::use_device(device, "cuda::max_pool2d_backward");
  const bool tiles = is_2x2_stride_2(g) && g.H % 2 == 0 && g.W % 2 == 0;
  max_pool_backward_kernel<<<blocks_for(n), kThreads>>>(g, dy, argmax, tiles, dx);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void avg_pool2d(int device, const PoolGeometry& g, const float* x, float* y) {
  const int64_t n = g.N * g.C * g.OH * g.OW;
  if (n == 0) return;
  detail::use_device(device, "cuda::avg_pool2d");
  avg_pool_kernel<<<blocks_for(n), kThreads>>>(g, x, window_scale(g), y);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void avg_pool2d_backward(int device, const PoolGeometry& g, const float* dy, float* dx) {
  const int64_t n = g.N * g.C * g.H * g.W;
  if (n == 0) return;
  detail::use_device(device, "cuda::avg_pool2d_backward");
  avg_pool_backward_kernel<<<blocks_for(n), kThreads>>>(g, dy, window_scale(g), dx);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::cuda
