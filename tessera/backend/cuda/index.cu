// Indexing on the device (nn_kernels.h): max over a dim and its backward (cpu_reduce.cpp), the
// index check, gather and scatter-add behind embedding and index_select (cpu_index.cpp), and
// dropout's mask. Launch shapes:
//   max:         over the last dim (inner 1) of more than kShortRow a block per row, reducing
//                (value, index) pairs; otherwise a thread per output, reading its column (or short
//                row) in order (over another dim adjacent threads read adjacent columns, so each step
//                is coalesced);
//   check:       one block over the indices, then 16 bytes back to the host;
//   gather:      a thread per output element;
//   scatter-add: cub's stable radix sort of (index, position) pairs, then a thread per (run of one
//                index, column) adding its sources in position order: no float atomics, and the
//                CPU's order of additions, so the CPU's bits on every run. A run is one thread's
//                work: an index repeated many times (a padding token) makes that thread long;
//   dropout:     a thread per element.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tessera/backend/cuda/cuda_check.h"
#include "tessera/backend/cuda/launch.cuh"
#include "tessera/backend/cuda/nn_kernels.h"

namespace tessera::cuda {
namespace {

// ---- max ----

// Rows this short are a thread's each: a block of 256 threads would sit mostly idle.
constexpr int64_t kShortRow = 32;

// Whether (v, i) beats (best, best_i) as max's answer: a NaN beats any number (the first NaN
// wins), a larger value beats a smaller, and of equals the first index wins. Index -1 is no
// candidate. A total order on the candidates, so any reduction order gives the CPU's answer.
__device__ __forceinline__ bool beats(float v, int64_t i, float best, int64_t best_i) {
  if (i < 0) return false;
  if (best_i < 0) return true;
  const bool v_nan = isnan(v), best_nan = isnan(best);
  if (v_nan || best_nan) return v_nan && (!best_nan || i < best_i);
  return v > best || (v == best && i < best_i);
}

__global__ void max_rows_kernel(const float* __restrict__ in, int64_t first_row, int64_t n,
                                float* __restrict__ values, int64_t* __restrict__ indices) {
  __shared__ float best_values[kRowThreads];
  __shared__ int64_t best_indices[kRowThreads];
  const int64_t row = first_row + blockIdx.x;
  const float* x = in + row * n;
  float best = 0.0f;
  int64_t best_i = -1;
  for (int64_t r = threadIdx.x; r < n; r += kRowThreads)
    if (beats(x[r], r, best, best_i)) {
      best = x[r];
      best_i = r;
    }
  best_values[threadIdx.x] = best;
  best_indices[threadIdx.x] = best_i;
  __syncthreads();
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && beats(best_values[threadIdx.x + half], best_indices[threadIdx.x + half],
                                    best_values[threadIdx.x], best_indices[threadIdx.x])) {
      best_values[threadIdx.x] = best_values[threadIdx.x + half];
      best_indices[threadIdx.x] = best_indices[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    values[row] = best_values[0];
    indices[row] = best_indices[0];
  }
}

// The CPU's loop itself, down one column of (outer, n, inner).
__global__ void max_columns_kernel(const float* __restrict__ in, int64_t outer, int64_t n, int64_t inner,
                                   float* __restrict__ values, int64_t* __restrict__ indices) {
  const int64_t total = outer * inner;
  for (int64_t o = first_index(); o < total; o += grid_stride()) {
    const int64_t a = o / inner, b = o - a * inner;
    const float* x = in + a * n * inner + b;
    float best = x[0];
    int64_t arg = 0;
    for (int64_t r = 1; r < n && !isnan(best); ++r) {
      const float v = x[r * inner];
      if (v > best || isnan(v)) {
        best = v;
        arg = r;
      }
    }
    values[o] = best;
    indices[o] = arg;
  }
}

// Every input element written once: the gradient where max picked it, else 0.
__global__ void max_backward_kernel(const float* __restrict__ grad, const int64_t* __restrict__ indices,
                                    int64_t n, int64_t inner, int64_t total, float* __restrict__ grad_in) {
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t b = e % inner, ar = e / inner, a = ar / n, r = ar - a * n;
    const int64_t o = a * inner + b;
    grad_in[e] = indices[o] == r ? 0.0f + grad[o] : 0.0f;  // zeros + g, as the CPU's scatter (-0 becomes +0)
  }
}

// ---- indices ----

// One block: the least position whose index is outside [0, bound), and that index.
__global__ void check_indices_kernel(const int64_t* __restrict__ indices, int64_t n, int64_t bound,
                                     int64_t* __restrict__ result) {
  __shared__ int64_t scratch[kRowThreads];
  int64_t bad = n;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads)
    if (indices[i] < 0 || indices[i] >= bound) {
      bad = i;  // a thread's positions ascend: its first is its least
      break;
    }
  bad = block_reduce(bad, scratch, Min{});
  if (threadIdx.x == 0) {
    result[0] = bad < n ? bad : -1;
    result[1] = bad < n ? indices[bad] : 0;
  }
}

__global__ void gather_kernel(const float* __restrict__ src, const int64_t* __restrict__ indices, int64_t n,
                              int64_t inner, int64_t k, int64_t total, float* __restrict__ out) {
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t j = e % inner, ai = e / inner, a = ai / k, i = ai - a * k;
    out[e] = src[(a * n + indices[i]) * inner + j];
  }
}

__global__ void iota_kernel(int64_t* __restrict__ out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = i;
}

// A thread per (outer a, sorted position s, column j) where s starts a run of one index v: the
// run's sources added in position order (the sort is stable) into grad_in[a, v, j], from 0 as the
// CPU's zeros. Threads inside a run have nothing to do.
__global__ void scatter_add_kernel(const float* __restrict__ grad, const int64_t* __restrict__ keys,
                                   const int64_t* __restrict__ positions, int64_t n, int64_t inner, int64_t k,
                                   int64_t total, float* __restrict__ grad_in) {
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t j = e % inner, as = e / inner, a = as / k, s = as - a * k;
    const int64_t v = keys[s];
    if (s > 0 && keys[s - 1] == v) continue;
    float acc = 0.0f;
    for (int64_t q = s; q < k && keys[q] == v; ++q) acc += grad[(a * k + positions[q]) * inner + j];
    grad_in[(a * n + v) * inner + j] = acc;
  }
}

// The radix sort's key bits: enough for 0 .. n - 1 (indices are in range: the forward checked them).
int key_bits(int64_t n) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) < n) ++bits;
  return bits;
}

constexpr size_t kScratchAlignment = 256;
size_t aligned(size_t bytes) { return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment; }

// The scratch of scatter_add_rows: sorted keys, positions in, positions out (k int64 each), then cub's.
struct SortScratch {
  int64_t* keys;
  int64_t* positions_in;
  int64_t* positions_out;
  void* temp;
  size_t temp_bytes;
};

size_t sort_temp_bytes(int64_t k, int64_t n) {
  size_t bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int64_t*>(nullptr),
                                                     static_cast<int64_t*>(nullptr),
                                                     static_cast<const int64_t*>(nullptr),
                                                     static_cast<int64_t*>(nullptr), k, 0, key_bits(n)));
  return bytes;
}

SortScratch sort_scratch(void* scratch, int64_t k, int64_t n) {
  char* base = static_cast<char*>(scratch);
  const size_t array = aligned(sizeof(int64_t) * static_cast<size_t>(k));
  return {reinterpret_cast<int64_t*>(base), reinterpret_cast<int64_t*>(base + array),
          reinterpret_cast<int64_t*>(base + 2 * array), base + 3 * array, sort_temp_bytes(k, n)};
}

// ---- dropout ----

// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014):
// its i-th output for `seed` is the finaliser of seed + (i + 1) · γ, so element i is drawn on its
// own. core/rng.h's mix64 is the same finaliser.
__device__ __forceinline__ uint64_t splitmix64(uint64_t seed, uint64_t i) {
  uint64_t x = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The uniform float is Generator::uniform's transform: the top 24 bits times 2^-24, in [0, 1).
__global__ void dropout_kernel(float* __restrict__ mask, int64_t n, float p, float keep_scale, uint64_t seed) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float u = static_cast<float>(splitmix64(seed, static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
    mask[i] = u >= p ? keep_scale : 0.0f;
  }
}

}  // namespace

void max_over_dim(int device, const float* in, int64_t outer, int64_t n, int64_t inner, float* values,
                  int64_t* indices) {
  const int64_t total = outer * inner;
  if (total == 0 || n == 0) return;
  detail::use_device(device, "cuda::max_over_dim");
  if (inner == 1 && n > kShortRow) {
    for (int64_t r = 0; r < outer; r += kMaxRowsPerLaunch) {
      const int64_t count = std::min(outer - r, kMaxRowsPerLaunch);
      max_rows_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(in, r, n, values, indices);
    }
  } else {
    max_columns_kernel<<<blocks_for(total), kThreads>>>(in, outer, n, inner, values, indices);
  }
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void max_over_dim_backward(int device, const float* grad, const int64_t* indices, int64_t outer, int64_t n,
                           int64_t inner, float* grad_in) {
  const int64_t total = outer * n * inner;
  if (total == 0) return;
  detail::use_device(device, "cuda::max_over_dim_backward");
  max_backward_kernel<<<blocks_for(total), kThreads>>>(grad, indices, n, inner, total, grad_in);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

IndexCheck check_indices(int device, const int64_t* indices, int64_t n, int64_t bound, void* scratch) {
  if (n == 0) return {};
  detail::use_device(device, "cuda::check_indices");
  auto* result = static_cast<int64_t*>(scratch);
  check_indices_kernel<<<1, kRowThreads>>>(indices, n, bound, result);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  int64_t host[2];
  TESSERA_CUDA_CHECK(cudaMemcpy(host, result, sizeof host, cudaMemcpyDeviceToHost));
  return {host[0], host[1]};
}

void gather_rows(int device, const float* src, const int64_t* indices, int64_t outer, int64_t n, int64_t inner,
                 int64_t k, float* out) {
  const int64_t total = outer * k * inner;
  if (total == 0) return;
  detail::use_device(device, "cuda::gather_rows");
  gather_kernel<<<blocks_for(total), kThreads>>>(src, indices, n, inner, k, total, out);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

size_t scatter_add_scratch_bytes(int device, int64_t k, int64_t n) {
  if (k == 0) return 0;
  detail::use_device(device, "cuda::scatter_add_scratch_bytes");
  return 3 * aligned(sizeof(int64_t) * static_cast<size_t>(k)) + sort_temp_bytes(k, n);
}

void scatter_add_rows(int device, const float* grad, const int64_t* indices, int64_t outer, int64_t n, int64_t inner,
                      int64_t k, float* grad_in, void* scratch) {
  const int64_t out_total = outer * n * inner;
  if (out_total == 0) return;
  detail::use_device(device, "cuda::scatter_add_rows");
  TESSERA_CUDA_CHECK(cudaMemsetAsync(grad_in, 0, sizeof(float) * static_cast<size_t>(out_total), nullptr));
  const int64_t total = outer * k * inner;
  if (total == 0) return;
  SortScratch s = sort_scratch(scratch, k, n);
  iota_kernel<<<blocks_for(k), kThreads>>>(s.positions_in, k);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.temp, s.temp_bytes, indices, s.keys, s.positions_in,
                                                     s.positions_out, k, 0, key_bits(n), nullptr));
  scatter_add_kernel<<<blocks_for(total), kThreads>>>(grad, s.keys, s.positions_out, n, inner, k, total, grad_in);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

void dropout_mask(int device, float* mask, int64_t n, float p, float keep_scale, uint64_t seed) {
  if (n == 0) return;
  detail::use_device(device, "cuda::dropout_mask");
  dropout_kernel<<<blocks_for(n), kThreads>>>(mask, n, p, keep_scale, seed);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::cuda
