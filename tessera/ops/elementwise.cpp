// Elementwise ops with NumPy broadcasting: validation and autograd; the arithmetic is the kernel
// table's (kernels.h: one unary and one binary kernel, with an op code per formula). Each backward
// is one kernel call where it can be, so that it costs one pass, not a chain of ops.
#include "tessera/ops/detail.h"
#include "tessera/ops/kernels.h"

namespace tessera {

using autograd::record;

namespace {

Tensor unary_kernel(UnaryOp op, const Tensor& a, float scalar = 0.0f) {
  return kernels_for(a).unary(op, a, scalar);
}

Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, float scalar = 0.0f) {
  return kernels_for(a).binary(op, a, b, scalar);
}

void check_binary(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_float(a, op, "a");
  detail::check_float(b, op, "b");
  detail::check_same_device(a, b, op);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "add");
  Tensor out = binary_kernel(BinaryOp::kAdd, a, b);
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "AddBackward", {a, b},
                [sa, sb](const Tensor& g) { return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)}; }, autograd::Saves::Nothing);
}

Tensor sub(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "sub");
  Tensor out = binary_kernel(BinaryOp::kSub, a, b);
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "SubBackward", {a, b},
                [sa, sb](const Tensor& g) { return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)}; }, autograd::Saves::Nothing);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "mul");
  Tensor out = binary_kernel(BinaryOp::kMul, a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "MulBackward", {a, b}, [a, b, ga, gb](const Tensor& g) {
    return std::vector<Tensor>{ga ? sum_to(mul(g, b), a.shape()) : Tensor(),
                               gb ? sum_to(mul(g, a), b.shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  check_binary(a, b, "div");
  Tensor out = binary_kernel(BinaryOp::kDiv, a, b);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record(out, "DivBackward", {a, b}, [a, b, ga, gb](const Tensor& g) {
    Tensor gb_t;
    if (gb) gb_t = sum_to(binary_kernel(BinaryOp::kDivisorGrad, mul(g, a), b), b.shape());
    return std::vector<Tensor>{ga ? sum_to(div(g, b), a.shape()) : Tensor(), gb_t};
  });
}

Tensor add(const Tensor& a, float s) {
  detail::check_float(a, "add", "a");
  Tensor out = unary_kernel(UnaryOp::kAddScalar, a, s);
  return record(out, "AddScalarBackward", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; }, autograd::Saves::Nothing);
}

Tensor mul(const Tensor& a, float s) {
  detail::check_float(a, "mul", "a");
  Tensor out = unary_kernel(UnaryOp::kMulScalar, a, s);
  return record(out, "MulScalarBackward", {a}, [s](const Tensor& g) { return std::vector<Tensor>{mul(g, s)}; }, autograd::Saves::Nothing);
}

Tensor pow(const Tensor& a, float e) {
  detail::check_float(a, "pow", "a");
  Tensor out = unary_kernel(UnaryOp::kPowScalar, a, e);
  return record(out, "PowBackward", {a}, [a, e](const Tensor& g) {
    return std::vector<Tensor>{binary_kernel(BinaryOp::kPowScalarGrad, g, a, e)};
  });
}

Tensor pow(const Tensor& a, const Tensor& e) {
  check_binary(a, e, "pow");
  Tensor out = binary_kernel(BinaryOp::kPow, a, e);
  Tensor saved = out.detach();
  return record(out, "PowTensorBackward", {a, e}, [a, e, saved](const Tensor& g) {
    Tensor ga = mul(g, binary_kernel(BinaryOp::kPowBaseGrad, a, e));
    Tensor ge = mul(g, binary_kernel(BinaryOp::kPowExponentGrad, saved, a));
    return std::vector<Tensor>{sum_to(ga, a.shape()), sum_to(ge, e.shape())};
  });
}

Tensor neg(const Tensor& a) {
  detail::check_float(a, "neg", "a");
  return record(unary_kernel(UnaryOp::kNeg, a), "NegBackward", {a},
                [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; }, autograd::Saves::Nothing);
}

Tensor exp(const Tensor& a) {
  detail::check_float(a, "exp", "a");
  Tensor out = unary_kernel(UnaryOp::kExp, a);
  Tensor saved = out.detach();
  return record(out, "ExpBackward", {a}, [saved](const Tensor& g) { return std::vector<Tensor>{mul(g, saved)}; }, autograd::Saves::Nothing);
}

Tensor log(const Tensor& a) {
  detail::check_float(a, "log", "a");
  return record(unary_kernel(UnaryOp::kLog, a), "LogBackward", {a},
                [a](const Tensor& g) { return std::vector<Tensor>{div(g, a)}; });
}

namespace {
// An op whose backward reads its output: g · f'(out), one binary kernel.
Tensor with_output_backward(const Tensor& a, UnaryOp forward, BinaryOp backward, const char* node) {
  detail::check_float(a, op_name(forward), "a");
  Tensor out = unary_kernel(forward, a);
  Tensor saved = out.detach();
  return record(out, node, {a}, [saved, backward](const Tensor& g) {
    return std::vector<Tensor>{binary_kernel(backward, g, saved)};
  }, autograd::Saves::Nothing);
}
}  // namespace

Tensor sqrt(const Tensor& a) { return with_output_backward(a, UnaryOp::kSqrt, BinaryOp::kSqrtGrad, "SqrtBackward"); }
Tensor tanh(const Tensor& a) { return with_output_backward(a, UnaryOp::kTanh, BinaryOp::kTanhGrad, "TanhBackward"); }
Tensor sigmoid(const Tensor& a) {
  return with_output_backward(a, UnaryOp::kSigmoid, BinaryOp::kSigmoidGrad, "SigmoidBackward");
}
Tensor relu(const Tensor& a) { return with_output_backward(a, UnaryOp::kRelu, BinaryOp::kReluGrad, "ReluBackward"); }

Tensor gelu(const Tensor& a) {
  detail::check_float(a, "gelu", "a");
  Tensor out = unary_kernel(UnaryOp::kGelu, a);
  return record(out, "GeluBackward", {a}, [a](const Tensor& g) {
    return std::vector<Tensor>{binary_kernel(BinaryOp::kGeluGrad, g, a)};
  });
}

namespace {
// A float32 1/0 mask from any nonzero-means-true tensor.
Tensor as_float_mask(const Tensor& m, const char* op) {
  detail::check_defined(m, op, "mask");
  if (m.dtype() == DType::Float32) return unary_kernel(UnaryOp::kNonzero, m);
  return to_dtype(m, DType::Float32);
}
}  // namespace

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  check_binary(a, b, "where");
  detail::check_same_device(condition, a, "where");
  Tensor c = as_float_mask(condition, "where");
  Shape shape = broadcast_shapes(broadcast_shapes(c.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor picked_a = binary_kernel(BinaryOp::kKeepWhere, a, expand(c, shape));
  Tensor picked_b = binary_kernel(BinaryOp::kDropWhere, b, c);
  Tensor out = binary_kernel(BinaryOp::kAdd, picked_a, picked_b);
  Shape sa = a.shape(), sb = b.shape();
  return record(out, "WhereBackward", {a, b}, [c, sa, sb](const Tensor& g) {
    Tensor ga = binary_kernel(BinaryOp::kKeepWhere, g, c);
    Tensor gb = binary_kernel(BinaryOp::kDropWhere, g, c);
    return std::vector<Tensor>{sum_to(ga, sa), sum_to(gb, sb)};
  }, autograd::Saves::Nothing);
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, float value) {
  detail::check_float(t, "masked_fill", "t");
  detail::check_same_device(t, mask, "masked_fill");
  Tensor m = as_float_mask(mask, "masked_fill");
  TESSERA_CHECK(broadcast_shapes(t.shape(), m.shape(), "masked_fill") == t.shape(), "[masked_fill] mask shape ",
                shape_str(m.shape()), " does not broadcast to tensor shape ", shape_str(t.shape()));
  Tensor out = binary_kernel(BinaryOp::kFillWhere, t, m, value);
  return record(out, "MaskedFillBackward", {t}, [m](const Tensor& g) {
    return std::vector<Tensor>{binary_kernel(BinaryOp::kDropWhere, g, m)};
  }, autograd::Saves::Nothing);
}

Tensor gt(const Tensor& a, float value) {
  detail::check_float(a, "gt", "a");
  return unary_kernel(UnaryOp::kGreaterThan, a, value);
}

Tensor eq(const Tensor& a, const Tensor& b) {
  detail::check_same_device(a, b, "eq");
  Tensor fa = to_dtype(a, DType::Float32), fb = to_dtype(b, DType::Float32);
  return binary_kernel(BinaryOp::kEqual, fa, fb);
}

}  // namespace tessera
