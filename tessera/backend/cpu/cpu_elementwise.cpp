// The CPU's elementwise kernels, copies and fills. map1/map2 are the two loops every formula runs
// in: a flat loop over contiguous operands, split across the intra-op threads, or rows of the
// coalesced strided layout (loops.h) with the broadcast cases (inner stride 0) written out so that
// each vectorises. The op code is switched on once per call, outside the loop.
#include <cmath>
#include <cstring>

#include "tessera/backend/cpu/cpu_kernels.h"
#include "tessera/backend/cpu/loops.h"
#include "tessera/backend/cpu/vector_math.h"
#include "tessera/core/half_codec.h"
#include "tessera/ops/elementwise_formulas.h"
#include "tessera/ops/detail.h"
#include "tessera/util/thread_pool.h"

namespace tessera::cpu {

namespace elementwise_loops {

constexpr int64_t kGrain = 32768;

// The contiguous loop, with plain pointer arguments so that the compiler sees no aliasing.
template <typename F>
void flat1(const float* a, float* out, int64_t n, const F& f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i]);
}
template <typename F>
void flat2(const float* a, const float* b, float* out, int64_t n, const F& f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <typename F>
Tensor map1(const Tensor& a, const F& f) {
  Tensor out = Tensor::empty(a.shape());
  float* o = out.data<float>();
  const float* pa = a.data<float>();
  if (a.is_contiguous()) {
    parallel_for(0, a.numel(), kGrain, [&](int64_t b, int64_t e) { flat1(pa + b, o + b, e - b, f); });
    return out;
  }
  for_each_row<2>(a.shape(), {&out.strides(), &a.strides()},
                  [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
                    for (int64_t i = 0; i < n; ++i) o[off[0] + i * st[0]] = f(pa[off[1] + i * st[1]]);
                  });
  return out;
}

template <typename F>
Tensor map2(const Tensor& a, const Tensor& b, const F& f, const char* op) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape);
  float* o = out.data<float>();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  if (a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous()) {
    parallel_for(0, out.numel(), kGrain, [&](int64_t s, int64_t e) { flat2(pa + s, pb + s, o + s, e - s, f); });
    return out;
  }
  Shape sa = detail::broadcast_strides(a, shape), sb = detail::broadcast_strides(b, shape);
  for_each_row<3>(shape, {&out.strides(), &sa, &sb},
                  [&](int64_t n, std::array<int64_t, 3> off, std::array<int64_t, 3> st) {
                    float* op_ = o + off[0];
                    const float* x = pa + off[1];
                    const float* y = pb + off[2];
                    if (st[1] == 1 && st[2] == 1) {
                      for (int64_t i = 0; i < n; ++i) op_[i] = f(x[i], y[i]);
                    } else if (st[1] == 1 && st[2] == 0) {
                      float yv = y[0];
                      for (int64_t i = 0; i < n; ++i) op_[i] = f(x[i], yv);
                    } else if (st[1] == 0 && st[2] == 1) {
                      float xv = x[0];
                      for (int64_t i = 0; i < n; ++i) op_[i] = f(xv, y[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) op_[i] = f(x[i * st[1]], y[i * st[2]]);
                    }
                  });
  return out;
}

// GELU's two passes over contiguous memory, with erf and exp written so that GCC vectorises them
// (vector_math.h). With libm's erff and expf they ran scalar: 18% of the GPT's step. Both run on
// contiguous copies of their operands, whatever the strides, so every layout gives the same bits.
void gelu_forward_loop(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * x[i] * (1.0f + erf_vectorisable(x[i] * kInvSqrt2));
}

void gelu_backward_loop(const float* g, const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.0f + erf_vectorisable(x[i] * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * exp_vectorisable(-0.5f * x[i] * x[i]);
    out[i] = g[i] * (cdf + x[i] * pdf);
  }
}

Tensor gelu_of_contiguous(const Tensor& a_in) {
  const Tensor a = detail::as_contiguous(a_in);
  Tensor out = Tensor::empty(a.shape());
  const float* x = a.data<float>();
  float* o = out.data<float>();
  parallel_for(0, a.numel(), kGrain, [&](int64_t lo, int64_t hi) { gelu_forward_loop(x + lo, o + lo, hi - lo); });
  return out;
}

Tensor gelu_grad_of_contiguous(const Tensor& g_in, const Tensor& a_in) {
  const Tensor g = detail::as_contiguous(g_in), a = detail::as_contiguous(a_in);
  Tensor grad = Tensor::empty(a.shape());
  const float* gp = g.data<float>();
  const float* x = a.data<float>();
  float* d = grad.data<float>();
  parallel_for(0, a.numel(), kGrain, [&](int64_t lo, int64_t hi) { gelu_backward_loop(gp + lo, x + lo, d + lo, hi - lo); });
  return grad;
}

template <typename Dst, typename Src, typename Convert>
void strided_convert(Tensor& dst, const Tensor& src, const Convert& convert) {
  Shape sst = detail::broadcast_strides(src, dst.shape());
  Dst* d = static_cast<Dst*>(dst.raw_data());
  const Src* s = static_cast<const Src*>(src.raw_data());
  for_each_row<2>(dst.shape(), {&dst.strides(), &sst},
                  [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
                    Dst* dp = d + off[0];
                    const Src* sp = s + off[1];
                    if (st[0] == 1 && st[1] == 1) {
                      for (int64_t i = 0; i < n; ++i) dp[i] = convert(sp[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) dp[i * st[0]] = convert(sp[i * st[1]]);
                    }
                  });
}

}  // namespace elementwise_loops

using namespace elementwise_loops;

// The formulas are ops/elementwise_formulas.h's, one loop instantiated per op code; GELU's two
// keep their vectorisable loops.
Tensor CpuKernels::unary(UnaryOp op, const Tensor& a, float s) const {
  if (op == UnaryOp::kGelu) return gelu_of_contiguous(a);
  return with_unary_op(op, [&]<UnaryOp code>() { return map1(a, [s](float x) { return unary_formula<code>(x, s); }); });
}

Tensor CpuKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b, float s) const {
  if (op == BinaryOp::kGeluGrad) return gelu_grad_of_contiguous(a, b);
  const char* name = op_name(op);
  return with_binary_op(op, [&]<BinaryOp code>() {
    return map2(a, b, [s](float x, float y) { return binary_formula<code>(x, y, s); }, name);
  });
}

void CpuKernels::copy(Tensor& dst, const Tensor& src) const {
  auto same = [](auto v) { return v; };
  DType a = dst.dtype(), b = src.dtype();
  if (a == b && dst.shape() == src.shape() && dst.is_contiguous() && src.is_contiguous()) {
    // A plain copy (clone, a gradient into DDP's bucket): memcpy split across the intra-op threads
    // (memmove where the two overlap) instead of the strided loop. Measured in `tessera bench ddp`
    // on the MLP: the loop was 15% of a DDP step, more than the whole all-reduce.
    char* d = static_cast<char*>(dst.raw_data());
    const char* s = static_cast<const char*>(src.raw_data());
    const int64_t bytes = src.numel() * static_cast<int64_t>(dtype_size(src.dtype()));
    if (d == s) return;
    if (d + bytes <= s || s + bytes <= d) {  // apart: split across the intra-op threads
      parallel_for(0, bytes, int64_t{1} << 18, [=](int64_t b, int64_t e) {
        std::memcpy(d + b, s + b, static_cast<size_t>(e - b));
      });
    } else {
      std::memmove(d, s, static_cast<size_t>(bytes));
    }
    return;
  }
  if (a == DType::Float32 && b == DType::Float32) strided_convert<float, float>(dst, src, same);
  else if (a == DType::Int64 && b == DType::Int64) strided_convert<int64_t, int64_t>(dst, src, same);
  else if (a == DType::BFloat16 && b == DType::BFloat16) strided_convert<BFloat16, BFloat16>(dst, src, same);
  else if (a == DType::Float32 && b == DType::Int64)
    strided_convert<float, int64_t>(dst, src, [](int64_t v) { return static_cast<float>(v); });
  else if (a == DType::Int64 && b == DType::Float32)
    strided_convert<int64_t, float>(dst, src, [](float v) { return static_cast<int64_t>(v); });
  else if (a == DType::BFloat16 && b == DType::Float32)
    strided_convert<BFloat16, float>(dst, src, [](float v) { return float_to_bf16(v); });
  else if (a == DType::Float32 && b == DType::BFloat16)
    strided_convert<float, BFloat16>(dst, src, [](BFloat16 v) { return bf16_to_float(v); });
  else if (a == DType::BFloat16 && b == DType::Int64)
    strided_convert<BFloat16, int64_t>(dst, src, [](int64_t v) { return float_to_bf16(static_cast<float>(v)); });
  else if (a == DType::Int64 && b == DType::BFloat16)
    strided_convert<int64_t, BFloat16>(dst, src, [](BFloat16 v) { return static_cast<int64_t>(bf16_to_float(v)); });
  else if (a == DType::Float16 && b == DType::Float16) strided_convert<Half, Half>(dst, src, same);
  else if (a == DType::Float16 && b == DType::Float32)
    strided_convert<Half, float>(dst, src, [](float v) { return Half{fp16_from_float(v)}; });
  else if (a == DType::Float32 && b == DType::Float16)
    strided_convert<float, Half>(dst, src, [](Half v) { return fp16_to_float(v.bits); });
  else
    throw NotSupportedError(std::string("[to] no conversion from ") + dtype_name(b) + " to " + dtype_name(a) +
                            "; go through float32");
}

void CpuKernels::fill(Tensor& t, float value) const {
  if (t.dtype() == DType::Float32 && t.is_contiguous()) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
    return;
  }
  Tensor v = Tensor::empty({});
  v.data<float>()[0] = value;
  copy(t, v);
}

void CpuKernels::add_scaled(Tensor& dst, const Tensor& src, float alpha) const {
  Shape sst = detail::broadcast_strides(src, dst.shape());
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  for_each_row<2>(dst.shape(), {&dst.strides(), &sst},
                  [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
                    float* dp = d + off[0];
                    const float* sp = s + off[1];
                    if (st[0] == 1 && st[1] == 1)
                      for (int64_t i = 0; i < n; ++i) dp[i] += alpha * sp[i];
                    else
                      for (int64_t i = 0; i < n; ++i) dp[i * st[0]] += alpha * sp[i * st[1]];
                  });
}

void CpuKernels::scale(Tensor& dst, float value) const {
  float* d = dst.data<float>();
  for_each_row<1>(dst.shape(), {&dst.strides()},
                  [&](int64_t n, std::array<int64_t, 1> off, std::array<int64_t, 1> st) {
                    for (int64_t i = 0; i < n; ++i) d[off[0] + i * st[0]] *= value;
                  });
}

const Kernels& cpu_kernels() {
  static const CpuKernels table;
  return table;
}

}  // namespace tessera::cpu
