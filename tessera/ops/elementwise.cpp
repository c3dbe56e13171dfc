// Elementwise ops with NumPy broadcasting. map1/map2 are the two kernels everything here is made of;
// each backward is written with them directly so it costs one pass, not a chain of ops.
#include <cmath>

#include "tessera/backend/cpu/loops.h"
#include "tessera/backend/cpu/vector_math.h"
#include "tessera/ops/detail.h"

namespace tessera {

using autograd::record;

namespace {

template <typename F>
Tensor map1(const Tensor& a, const F& f) {
  Tensor out = Tensor::empty(a.shape());
  float* o = out.data<float>();
  const float* pa = a.data<float>();
  if (a.is_contiguous()) {
    int64_t n = a.numel();
    parallel_for(0, n, 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = f(pa[i]);
    });
    return out;
  }
  cpu::for_each_row<2>(a.shape(), {&out.strides(), &a.strides()},
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
    int64_t n = out.numel();
    parallel_for(0, n, 32768, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) o[i] = f(pa[i], pb[i]);
    });
    return out;
  }
  Shape sa = detail::broadcast_strides(a, shape), sb = detail::broadcast_strides(b, shape);
  cpu::for_each_row<3>(shape, {&out.strides(), &sa, &sb},
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

void check_binary(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_float(a, op, "a");
  detail::check_float(b, op, "b");
  detail::check_same_device(a, b, op);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "add");
  Tensor out = map2(a, b, [](float x, float y) { return x + y; }, "add");
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "AddBackward", {a, b},
                [sa, sb](const Tensor& g) { return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)}; }, autograd::Saves::Nothing);
}

Tensor sub(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "sub");
  Tensor out = map2(a, b, [](float x, float y) { return x - y; }, "sub");
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "SubBackward", {a, b},
                [sa, sb](const Tensor& g) { return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)}; }, autograd::Saves::Nothing);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "mul");
  Tensor out = map2(a, b, [](float x, float y) { return x * y; }, "mul");
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "MulBackward", {a, b}, [a, b, ga, gb](const Tensor& g) {
    return std::vector<Tensor>{ga ? sum_to(mul(g, b), a.shape()) : Tensor(),
                               gb ? sum_to(mul(g, a), b.shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "div");
  Tensor out = map2(a, b, [](float x, float y) { return x / y; }, "div");
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "DivBackward", {a, b}, [a, b, ga, gb](const Tensor& g) {
    Tensor gb_t;
    if (gb) gb_t = sum_to(map2(mul(g, a), b, [](float ga_, float y) { return -ga_ / (y * y); }, "div"), b.shape());
    return std::vector<Tensor>{ga ? sum_to(div(g, b), a.shape()) : Tensor(), gb_t};
  });
}

Tensor add(const Tensor& a, float s) {
  detail::check_float(a, "add", "a");
  Tensor out = map1(a, [s](float x) { return x + s; });
  return record(out, "AddScalarBackward", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; }, autograd::Saves::Nothing);
}

Tensor mul(const Tensor& a, float s) {
  detail::check_float(a, "mul", "a");
  Tensor out = map1(a, [s](float x) { return x * s; });
  return record(out, "MulScalarBackward", {a}, [s](const Tensor& g) { return std::vector<Tensor>{mul(g, s)}; }, autograd::Saves::Nothing);
}

Tensor pow(const Tensor& a, float e) {
  detail::check_float(a, "pow", "a");
  Tensor out = map1(a, [e](float x) { return std::pow(x, e); });
  return record(out, "PowBackward", {a}, [a, e](const Tensor& g) {
    return std::vector<Tensor>{
        map2(g, a, [e](float gv, float x) { return e == 0.0f ? 0.0f : gv * e * std::pow(x, e - 1.0f); }, "pow")};
  });
}

Tensor pow(const Tensor& a, const Tensor& e) {
  check_binary(a, e, "pow");
  Tensor out = map2(a, e, [](float x, float y) { return std::pow(x, y); }, "pow");
  Tensor saved = out.detach();
  return record(out, "PowTensorBackward", {a, e}, [a, e, saved](const Tensor& g) {
    Tensor ga = mul(g, map2(a, e, [](float x, float y) { return y == 0.0f ? 0.0f : y * std::pow(x, y - 1.0f); }, "pow"));
    Tensor ge = mul(g, map2(saved, a, [](float o, float x) { return x > 0.0f ? o * std::log(x) : 0.0f; }, "pow"));
    return std::vector<Tensor>{sum_to(ga, a.shape()), sum_to(ge, e.shape())};
  });
}

Tensor neg(const Tensor& a) {
  detail::check_float(a, "neg", "a");
  return record(map1(a, [](float x) { return -x; }), "NegBackward", {a},
                [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; }, autograd::Saves::Nothing);
}

Tensor exp(const Tensor& a) {
  detail::check_float(a, "exp", "a");
  Tensor out = map1(a, [](float x) { return std::exp(x); });
  Tensor saved = out.detach();
  return record(out, "ExpBackward", {a}, [saved](const Tensor& g) { return std::vector<Tensor>{mul(g, saved)}; }, autograd::Saves::Nothing);
}

Tensor log(const Tensor& a) {
  detail::check_float(a, "log", "a");
  return record(map1(a, [](float x) { return std::log(x); }), "LogBackward", {a},
                [a](const Tensor& g) { return std::vector<Tensor>{div(g, a)}; });
}

Tensor sqrt(const Tensor& a) {
  detail::check_float(a, "sqrt", "a");
  Tensor out = map1(a, [](float x) { return std::sqrt(x); });
  Tensor saved = out.detach();
  return record(out, "SqrtBackward", {a}, [saved](const Tensor& g) {
    return std::vector<Tensor>{map2(g, saved, [](float gv, float o) { return 0.5f * gv / o; }, "sqrt")};
  }, autograd::Saves::Nothing);
}

Tensor tanh(const Tensor& a) {
  detail::check_float(a, "tanh", "a");
  Tensor out = map1(a, [](float x) { return std::tanh(x); });
  Tensor saved = out.detach();
  return record(out, "TanhBackward", {a}, [saved](const Tensor& g) {
    return std::vector<Tensor>{map2(g, saved, [](float gv, float o) { return gv * (1.0f - o * o); }, "tanh")};
  }, autograd::Saves::Nothing);
}

Tensor sigmoid(const Tensor& a) {
  detail::check_float(a, "sigmoid", "a");
  Tensor out = map1(a, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
  Tensor saved = out.detach();
  return record(out, "SigmoidBackward", {a}, [saved](const Tensor& g) {
    return std::vector<Tensor>{map2(g, saved, [](float gv, float o) { return gv * o * (1.0f - o); }, "sigmoid")};
  }, autograd::Saves::Nothing);
}

Tensor relu(const Tensor& a) {
  detail::check_float(a, "relu", "a");
  Tensor out = map1(a, [](float x) { return cpu::relu_value(x); });
  Tensor saved = out.detach();
  return record(out, "ReluBackward", {a}, [saved](const Tensor& g) {
    return std::vector<Tensor>{map2(g, saved, [](float gv, float o) { return o > 0.0f ? gv : 0.0f; }, "relu")};
  }, autograd::Saves::Nothing);
}

// GELU's two passes over contiguous memory, with erf and exp written so that GCC vectorises them
// (backend/cpu/vector_math.h). With libm's erff and expf they ran scalar: 18% of the GPT's step.
namespace {
constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;

void gelu_forward_loop(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * x[i] * (1.0f + cpu::erf_vectorisable(x[i] * kInvSqrt2));
}

void gelu_backward_loop(const float* g, const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.0f + cpu::erf_vectorisable(x[i] * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * cpu::exp_vectorisable(-0.5f * x[i] * x[i]);
    out[i] = g[i] * (cdf + x[i] * pdf);
  }
}
}  // namespace

Tensor gelu(const Tensor& a_in) {
  detail::check_float(a_in, "gelu", "a");
  const Tensor a = detail::as_contiguous(a_in);
  Tensor out = Tensor::empty(a.shape());
  const float* x = a.data<float>();
  float* o = out.data<float>();
  parallel_for(0, a.numel(), 32768, [&](int64_t lo, int64_t hi) { gelu_forward_loop(x + lo, o + lo, hi - lo); });
  return record(out, "GeluBackward", {a_in}, [a](const Tensor& g_in) {
    const Tensor g = detail::as_contiguous(g_in);
    Tensor grad = Tensor::empty(a.shape());
    const float* gp = g.data<float>();
    const float* x = a.data<float>();
    float* d = grad.data<float>();
    parallel_for(0, a.numel(), 32768, [&](int64_t lo, int64_t hi) { gelu_backward_loop(gp + lo, x + lo, d + lo, hi - lo); });
    return std::vector<Tensor>{grad};
  });
}

namespace {
Tensor as_float_mask(const Tensor& m, const char* op) {
  detail::check_defined(m, op, "mask");
  if (m.dtype() == DType::Float32) return map1(m, [](float x) { return x != 0.0f ? 1.0f : 0.0f; });
  return to_dtype(m, DType::Float32);
}
}  // namespace

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  check_binary(a, b, "where");
  Tensor c = as_float_mask(condition, "where");
  Shape shape = broadcast_shapes(broadcast_shapes(c.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor picked_a = map2(expand(c, shape), a, [](float m, float x) { return m != 0.0f ? x : 0.0f; }, "where");
  Tensor out = map2(picked_a, map2(c, b, [](float m, float y) { return m != 0.0f ? 0.0f : y; }, "where"),
                    [](float x, float y) { return x + y; }, "where");
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "WhereBackward", {a, b}, [c, sa, sb](const Tensor& g) {
    Tensor ga = map2(g, c, [](float gv, float m) { return m != 0.0f ? gv : 0.0f; }, "where");
    Tensor gb = map2(g, c, [](float gv, float m) { return m != 0.0f ? 0.0f : gv; }, "where");
    return std::vector<Tensor>{sum_to(ga, sa), sum_to(gb, sb)};
  }, autograd::Saves::Nothing);
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, float value) {
  detail::check_float(t, "masked_fill", "t");
  Tensor m = as_float_mask(mask, "masked_fill");
  TESSERA_CHECK(broadcast_shapes(t.shape(), m.shape(), "masked_fill") == t.shape(), "[masked_fill] mask shape ",
                shape_str(m.shape()), " does not broadcast to tensor shape ", shape_str(t.shape()));
  Tensor out = map2(t, m, [value](float x, float mv) { return mv != 0.0f ? value : x; }, "masked_fill");
  return record(out, "MaskedFillBackward", {t}, [m](const Tensor& g) {
    return std::vector<Tensor>{map2(g, m, [](float gv, float mv) { return mv != 0.0f ? 0.0f : gv; }, "masked_fill")};
  }, autograd::Saves::Nothing);
}

Tensor gt(const Tensor& a, float value) {
  detail::check_float(a, "gt", "a");
  return map1(a, [value](float x) { return x > value ? 1.0f : 0.0f; });
}

Tensor eq(const Tensor& a, const Tensor& b) {
  Tensor fa = to_dtype(a, DType::Float32), fb = to_dtype(b, DType::Float32);
  return map2(fa, fb, [](float x, float y) { return x == y ? 1.0f : 0.0f; }, "eq");
}

}  // namespace tessera
