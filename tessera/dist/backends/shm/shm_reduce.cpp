#include "tessera/dist/backends/shm/shm_reduce.h"

#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::dist::detail {

namespace {

// The fold runs over blocks small enough that the accumulator stays in L1 (48 KiB here) while the
// n sources stream past it once: one pass over memory whatever n is. The accumulator also lets
// `out` alias a source: nothing is written until every source of the block has been read.
constexpr int64_t kBlockBytes = 8192;

struct Sum {
  template <typename T> T operator()(T x, T y) const { return x + y; }
};
// The same expressions as reduce_pair (std::max / std::min), so NaNs propagate the same way.
struct Max {
  template <typename T> T operator()(T x, T y) const { return std::max(x, y); }
};
struct Min {
  template <typename T> T operator()(T x, T y) const { return std::min(x, y); }
};

// What a block's result becomes before it is written: itself, or divided by the rank count (Avg).
template <typename T>
struct Finish {
  int64_t divisor = 1;  // 1: nothing to do
  void operator()(T* acc, int64_t m) const {
    if (divisor == 1) return;
    // Division, not the reciprocal's product: the same bits as ProcessGroup's divide_in_place.
    const T d = static_cast<T>(divisor);
    for (int64_t i = 0; i < m; ++i) acc[i] /= d;
  }
};

// Writes a finished block to every output.
void write_block(void* const* outs, int n_outs, int64_t base, const void* block, int64_t m, size_t elem) {
  for (int o = 0; o < n_outs; ++o)
    std::memcpy(static_cast<char*>(outs[o]) + static_cast<size_t>(base) * elem, block, static_cast<size_t>(m) * elem);
}

template <typename T, typename Op>
void fold(void* const* outs, int n_outs, const void* const* src_v, int n, int64_t count, Op op, Finish<T> finish) {
  constexpr int64_t kBlock = kBlockBytes / sizeof(T);
  alignas(64) T acc[kBlock];
  for (int64_t base = 0; base < count; base += kBlock) {
    const int64_t m = std::min(kBlock, count - base);
    const T* __restrict s0 = static_cast<const T*>(src_v[0]) + base;
    if (n == 1) {
      for (int64_t i = 0; i < m; ++i) acc[i] = s0[i];
    } else {
      const T* __restrict s1 = static_cast<const T*>(src_v[1]) + base;
      for (int64_t i = 0; i < m; ++i) acc[i] = op(s0[i], s1[i]);
    }
    for (int p = 2; p < n; ++p) {
      const T* __restrict s = static_cast<const T*>(src_v[p]) + base;
      for (int64_t i = 0; i < m; ++i) acc[i] = op(acc[i], s[i]);
    }
    finish(acc, m);
    write_block(outs, n_outs, base, acc, m, sizeof(T));
  }
}

inline float widen(uint16_t b) { return bf16_to_float(BFloat16{b}); }
// float_to_bf16 is branch-free, so the narrowing loop below vectorises.
inline uint16_t narrow(float f) { return float_to_bf16(f).bits; }

template <typename Op>
void fold_bf16(void* const* outs, int n_outs, const void* const* src_v, int n, int64_t count, Op op,
               Finish<float> finish) {
  constexpr int64_t kBlock = kBlockBytes / sizeof(float);
  alignas(64) float acc[kBlock];
  alignas(64) uint16_t result[kBlock];
  for (int64_t base = 0; base < count; base += kBlock) {
    const int64_t m = std::min(kBlock, count - base);
    const uint16_t* __restrict s0 = static_cast<const uint16_t*>(src_v[0]) + base;
    for (int64_t i = 0; i < m; ++i) acc[i] = widen(s0[i]);
    for (int p = 1; p < n; ++p) {
      const uint16_t* __restrict s = static_cast<const uint16_t*>(src_v[p]) + base;
      for (int64_t i = 0; i < m; ++i) acc[i] = op(acc[i], widen(s[i]));
    }
    finish(acc, m);
    for (int64_t i = 0; i < m; ++i) result[i] = narrow(acc[i]);
    write_block(outs, n_outs, base, result, m, 2);
  }
}

template <typename Op>
void fold_typed(void* const* outs, int n_outs, const void* const* src, int n, int64_t count, DType dtype, Op op,
                int64_t divisor = 1) {
  switch (dtype) {
    case DType::Float32: fold<float>(outs, n_outs, src, n, count, op, Finish<float>{divisor}); return;
    case DType::Int64: fold<int64_t>(outs, n_outs, src, n, count, op, Finish<int64_t>{divisor}); return;
    case DType::BFloat16: fold_bf16(outs, n_outs, src, n, count, op, Finish<float>{divisor}); return;
    case DType::Float16:
      throw NotSupportedError("[collective] float16 is not reduced by tessera's backends; reduce in float32 or bfloat16");
  }
}

}  // namespace

void shm_reduce_into(void* const* outs, int n_outs, const void* const* src, int n, int64_t count, DType dtype,
                     ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: fold_typed(outs, n_outs, src, n, count, dtype, Sum{}); return;
    case ReduceOp::Avg: fold_typed(outs, n_outs, src, n, count, dtype, Sum{}, n); return;
    case ReduceOp::Max: fold_typed(outs, n_outs, src, n, count, dtype, Max{}); return;
    case ReduceOp::Min: fold_typed(outs, n_outs, src, n, count, dtype, Min{}); return;
  }
}

void shm_reduce(void* out, void* out_copy, const void* const* src, int n, int64_t count, DType dtype, ReduceOp op) {
  void* outs[2] = {out, out_copy};
  shm_reduce_into(outs, out_copy != nullptr ? 2 : 1, src, n, count, dtype, op);
}

}  // namespace tessera::dist::detail
