// The CUDA backend's elementwise kernels (elementwise.h). One thread per output element in a
// grid-stride loop; a kernel per op code (its formula from ops/elementwise_formulas.h, shared with
// the CPU), with a flat path where every operand is contiguous and a strided one that turns the
// element's row-major index into each operand's offset. Memory-bound: what matters is that each
// element is read and written once, coalesced where the operands are contiguous.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tessera/backend/cuda/cuda_check.h"
#include "tessera/backend/cuda/elementwise.h"
#include "tessera/backend/cuda/launch.cuh"
#include "tessera/ops/elementwise_formulas.h"
#include "tessera/ops/optimizer_formulas.h"

namespace tessera::cuda {
namespace {

__device__ __forceinline__ int64_t offset_of(int64_t i, const IterationShape& shape, const Strides& strides) {
  int64_t offset = 0;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    const int64_t size = shape.sizes[d];
    offset += (i % size) * strides.of[d];
    i /= size;
  }
  return offset;
}

bool is_contiguous(const Strides& s, const IterationShape& shape) {
  int64_t expected = 1;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    if (shape.sizes[d] != 1 && s.of[d] != expected) return false;
    expected *= shape.sizes[d];
  }
  return true;
}

template <UnaryOp op>
__global__ void unary_kernel(float scalar, const float* __restrict__ a, Strides as, float* __restrict__ out,
                             IterationShape shape, bool flat) {
  for (int64_t i = first_index(); i < shape.numel; i += grid_stride())
    out[i] = unary_formula<op>(a[flat ? i : offset_of(i, shape, as)], scalar);
}

template <BinaryOp op>
__global__ void binary_kernel(float scalar, const float* __restrict__ a, Strides as, const float* __restrict__ b,
                              Strides bs, float* __restrict__ out, IterationShape shape, bool flat) {
  for (int64_t i = first_index(); i < shape.numel; i += grid_stride()) {
    const float x = a[flat ? i : offset_of(i, shape, as)], y = b[flat ? i : offset_of(i, shape, bs)];
    out[i] = binary_formula<op>(x, y, scalar);
  }
}

struct LaunchUnary {
  float scalar;
  const float* a;
  Strides as;
  float* out;
  IterationShape shape;
  bool flat;
  template <UnaryOp op>
  int operator()() const {
    unary_kernel<op><<<blocks_for(shape.numel), kThreads>>>(scalar, a, as, out, shape, flat);
    return 0;
  }
};

struct LaunchBinary {
  float scalar;
  const float* a;
  Strides as;
  const float* b;
  Strides bs;
  float* out;
  IterationShape shape;
  bool flat;
  template <BinaryOp op>
  int operator()() const {
    binary_kernel<op><<<blocks_for(shape.numel), kThreads>>>(scalar, a, as, b, bs, out, shape, flat);
    return 0;
  }
};

// ---- element conversions: as the CPU's (core/dtype.h, core/half_codec.h) ----

__device__ __forceinline__ float load_as_float(const void* p, int64_t k, ElementType t) {
  switch (t) {
    case ElementType::kFloat32: return static_cast<const float*>(p)[k];
    case ElementType::kInt64: return static_cast<float>(static_cast<const int64_t*>(p)[k]);
    case ElementType::kBFloat16: {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[k]) << 16;
      return __uint_as_float(bits);
    }
    case ElementType::kFloat16: return __half2float(static_cast<const __half*>(p)[k]);
  }
  return 0.0f;
}

// float32 to bfloat16: round to nearest even, NaN kept quiet with its sign (convert.cu's rule).
__device__ __forceinline__ uint16_t bfloat16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Nearest even, as the CPU's fp16_from_float (core/half_codec.cpp), whose NaN keeps its sign and the
// payload's top bits (__float2half_rn would give the canonical NaN).
__device__ __forceinline__ uint16_t float16_bits(float v) {
  const uint32_t u = __float_as_uint(v), magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  return __half_as_ushort(__float2half_rn(v));
}

__device__ __forceinline__ void store_from_float(void* p, int64_t k, ElementType t, float v) {
  switch (t) {
    case ElementType::kFloat32: static_cast<float*>(p)[k] = v; break;
    case ElementType::kInt64: static_cast<int64_t*>(p)[k] = static_cast<int64_t>(v); break;
    case ElementType::kBFloat16: static_cast<uint16_t*>(p)[k] = bfloat16_bits(v); break;
    case ElementType::kFloat16: static_cast<uint16_t*>(p)[k] = float16_bits(v); break;
  }
}

// Same type: the element's bytes, so int64 values beyond float's 24 bits survive.
template <typename T>
__global__ void copy_same_kernel(T* __restrict__ dst, Strides ds, const T* __restrict__ src, Strides ss,
                                 IterationShape shape) {
  for (int64_t i = first_index(); i < shape.numel; i += grid_stride())
    dst[offset_of(i, shape, ds)] = src[offset_of(i, shape, ss)];
}

__global__ void copy_convert_kernel(void* dst, ElementType dt, Strides ds, const void* src, ElementType st, Strides ss,
                                    IterationShape shape) {
  for (int64_t i = first_index(); i < shape.numel; i += grid_stride())
    store_from_float(dst, offset_of(i, shape, ds), dt, load_as_float(src, offset_of(i, shape, ss), st));
}

__global__ void fill_kernel(float* dst, Strides ds, IterationShape shape, float value) {
  for (int64_t i = first_index(); i < shape.numel; i += grid_stride()) dst[offset_of(i, shape, ds)] = value;
}

__global__ void add_scaled_kernel(float* dst, Strides ds, const float* src, Strides ss, IterationShape shape,
                                  float alpha) {
  for (int64_t i = first_index(); i < shape.numel; i += grid_stride())
    dst[offset_of(i, shape, ds)] += alpha * src[offset_of(i, shape, ss)];
}

__global__ void scale_kernel(float* dst, Strides ds, IterationShape shape, float value) {
  for (int64_t i = first_index(); i < shape.numel; i += grid_stride()) dst[offset_of(i, shape, ds)] *= value;
}

// ---- the fused optimizer updates: one element each, ops/optimizer_formulas.h (the CPU's too) ----

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf, int64_t n,
                           SgdStep s) {
  for (int64_t k = first_index(); k < n; k += grid_stride()) sgd_element(p[k], g[k], buf ? buf + k : nullptr, s);
}

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t n, AdamStep s) {
  for (int64_t k = first_index(); k < n; k += grid_stride()) adam_element(p[k], g[k], m[k], v[k], s);
}

__global__ void lars_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ v, int64_t n,
                            float local_lr, float wd, float mu) {
  for (int64_t k = first_index(); k < n; k += grid_stride()) lars_element(p[k], g[k], v ? v + k : nullptr, local_lr, wd, mu);
}

// LAMB's first pass: kLambBlocks blocks at most, each thread striding over the parameter, then each
// block's ||w||² and ||u||² into partial[2 · block] and partial[2 · block + 1].
__global__ void lamb_moments_kernel(const float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                    float* __restrict__ v, int64_t n, LambStep s, double* __restrict__ partial) {
  __shared__ double scratch[kRowThreads];
  double w_sq = 0.0, u_sq = 0.0;
  for (int64_t k = first_index(); k < n; k += grid_stride()) {
    lamb_moments_element(g[k], m[k], v[k], s);
    const float u = lamb_direction(m[k], v[k], p[k], s);
    w_sq += static_cast<double>(p[k]) * p[k];
    u_sq += static_cast<double>(u) * u;
  }
  w_sq = block_reduce(w_sq, scratch, Add{});
  u_sq = block_reduce(u_sq, scratch, Add{});
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = w_sq;
    partial[2 * blockIdx.x + 1] = u_sq;
  }
}

__global__ void lamb_apply_kernel(float* __restrict__ p, const float* __restrict__ m, const float* __restrict__ v,
                                  int64_t n, LambStep s, float step) {
  for (int64_t k = first_index(); k < n; k += grid_stride()) p[k] -= step * lamb_direction(m[k], v[k], p[k], s);
}


}  // namespace

void unary(int device, UnaryOp op, float scalar, const float* a, const Strides& as, float* out,
           const IterationShape& shape) {
  if (shape.numel == 0) return;
  detail::use_device(device, "cuda::unary");
  with_unary_op(op, LaunchUnary{scalar, a, as, out, shape, is_contiguous(as, shape)});
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void binary(int device, BinaryOp op, float scalar, const float* a, const Strides& as, const float* b,
            const Strides& bs, float* out, const IterationShape& shape) {
  if (shape.numel == 0) return;
  detail::use_device(device, "cuda::binary");
  const bool flat = is_contiguous(as, shape) && is_contiguous(bs, shape);
  with_binary_op(op, LaunchBinary{scalar, a, as, b, bs, out, shape, flat});
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void copy(int device, void* dst, ElementType dt, const Strides& ds, const void* src, ElementType st, const Strides& ss,
          const IterationShape& shape) {
  if (shape.numel == 0) return;
  detail::use_device(device, "cuda::copy");
  const unsigned blocks = blocks_for(shape.numel);
  if (dt == st && is_contiguous(ds, shape) && is_contiguous(ss, shape)) {
    const size_t element = dt == ElementType::kInt64 ? 8 : dt == ElementType::kFloat32 ? 4 : 2;
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(shape.numel) * element,
                                       cudaMemcpyDeviceToDevice, nullptr));
    return;
  }
  if (dt == st) {
    switch (dt) {
      case ElementType::kFloat32:
        copy_same_kernel<<<blocks, kThreads>>>(static_cast<float*>(dst), ds, static_cast<const float*>(src), ss, shape);
        break;
      case ElementType::kInt64:
        copy_same_kernel<<<blocks, kThreads>>>(static_cast<int64_t*>(dst), ds, static_cast<const int64_t*>(src), ss,
                                               shape);
        break;
      case ElementType::kBFloat16:
      case ElementType::kFloat16:
        copy_same_kernel<<<blocks, kThreads>>>(static_cast<uint16_t*>(dst), ds, static_cast<const uint16_t*>(src), ss,
                                               shape);
        break;
    }
  } else {
    copy_convert_kernel<<<blocks, kThreads>>>(dst, dt, ds, src, st, ss, shape);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void fill(int device, float* dst, const Strides& ds, const IterationShape& shape, float value) {
  if (shape.numel == 0) return;
  detail::use_device(device, "cuda::fill");
  fill_kernel<<<blocks_for(shape.numel), kThreads>>>(dst, ds, shape, value);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void add_scaled(int device, float* dst, const Strides& ds, const float* src, const Strides& ss,
                const IterationShape& shape, float alpha) {
  if (shape.numel == 0) return;
  detail::use_device(device, "cuda::add_scaled");
  add_scaled_kernel<<<blocks_for(shape.numel), kThreads>>>(dst, ds, src, ss, shape, alpha);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void scale(int device, float* dst, const Strides& ds, const IterationShape& shape, float value) {
  if (shape.numel == 0) return;
  detail::use_device(device, "cuda::scale");
  scale_kernel<<<blocks_for(shape.numel), kThreads>>>(dst, ds, shape, value);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void sgd_update(int device, float* p, const float* g, float* buf, int64_t n, const SgdStep& step) {
  if (n == 0) return;
  detail::use_device(device, "cuda::sgd_update");
  sgd_kernel<<<blocks_for(n), kThreads>>>(p, g, buf, n, step);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void adam_update(int device, float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& step) {
  if (n == 0) return;
  detail::use_device(device, "cuda::adam_update");
  adam_kernel<<<blocks_for(n), kThreads>>>(p, g, m, v, n, step);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void lars_update(int device, float* p, const float* g, float* buf, int64_t n, float local_lr, float weight_decay,
                 float momentum) {
  if (n == 0) return;
  detail::use_device(device, "cuda::lars_update");
  lars_kernel<<<blocks_for(n), kThreads>>>(p, g, buf, n, local_lr, weight_decay, momentum);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

std::pair<double, double> lamb_moments(int device, const float* p, const float* g, float* m, float* v, int64_t n,
                                       const LambStep& step, void* scratch) {
  if (n == 0) return {0.0, 0.0};
  detail::use_device(device, "cuda::lamb_moments");
  static_assert(kRowThreads == kThreads, "lamb_moments_kernel reduces over a row-sized block");
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kLambBlocks));
  auto* partial = static_cast<double*>(scratch);
  lamb_moments_kernel<<<blocks, kThreads>>>(p, g, m, v, n, step, partial);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  std::vector<double> host(2 * static_cast<size_t>(blocks));
  TESSERA_CUDA_CHECK(cudaMemcpy(host.data(), partial, sizeof(double) * host.size(), cudaMemcpyDeviceToHost));
  double w_sq = 0.0, u_sq = 0.0;
  for (int b = 0; b < blocks; ++b) {  // in block order: the same sums on every run
    w_sq += host[2 * static_cast<size_t>(b)];
    u_sq += host[2 * static_cast<size_t>(b) + 1];
  }
  return {w_sq, u_sq};
}

void lamb_apply(int device, float* p, const float* m, const float* v, int64_t n, const LambStep& step,
                float scaled_lr) {
  if (n == 0) return;
  detail::use_device(device, "cuda::lamb_apply");
  lamb_apply_kernel<<<blocks_for(n), kThreads>>>(p, m, v, n, step, scaled_lr);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::cuda
