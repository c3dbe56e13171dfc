// The formula of each elementwise op code (op_codes.h), written once for the CPU's loops
// (backend/cpu/cpu_elementwise.cpp) and the CUDA kernels (backend/cuda/elementwise.cu): each is a
// template on its code, so a loop or kernel instantiated for one formula carries no switch. (GELU's
// CPU loops use vectorisable erf and exp instead: backend/cpu/vector_math.h.)
#pragma once
#include <math.h>

#include "tessera/ops/host_device.h"
#include "tessera/ops/op_codes.h"

namespace tessera {

constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;

template <UnaryOp op>
TESSERA_HOST_DEVICE float unary_formula(float x, float s) {
  if constexpr (op == UnaryOp::kNeg) return -x;
  else if constexpr (op == UnaryOp::kExp) return expf(x);
  else if constexpr (op == UnaryOp::kLog) return logf(x);
  else if constexpr (op == UnaryOp::kSqrt) return sqrtf(x);
  else if constexpr (op == UnaryOp::kTanh) return tanhf(x);
  else if constexpr (op == UnaryOp::kSigmoid) return 1.0f / (1.0f + expf(-x));
  else if constexpr (op == UnaryOp::kRelu) return x > 0.0f ? x : 0.0f;  // NaN to 0
  else if constexpr (op == UnaryOp::kGelu) return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  else if constexpr (op == UnaryOp::kAddScalar) return x + s;
  else if constexpr (op == UnaryOp::kMulScalar) return x * s;
  else if constexpr (op == UnaryOp::kPowScalar) return powf(x, s);
  else if constexpr (op == UnaryOp::kGreaterThan) return x > s ? 1.0f : 0.0f;
  else return x != 0.0f ? 1.0f : 0.0f;  // kNonzero
}

template <BinaryOp op>
TESSERA_HOST_DEVICE float binary_formula(float x, float y, float s) {
  if constexpr (op == BinaryOp::kAdd) return x + y;
  else if constexpr (op == BinaryOp::kSub) return x - y;
  else if constexpr (op == BinaryOp::kMul) return x * y;
  else if constexpr (op == BinaryOp::kDiv) return x / y;
  else if constexpr (op == BinaryOp::kPow) return powf(x, y);
  else if constexpr (op == BinaryOp::kEqual) return x == y ? 1.0f : 0.0f;
  else if constexpr (op == BinaryOp::kKeepWhere) return y != 0.0f ? x : 0.0f;
  else if constexpr (op == BinaryOp::kDropWhere) return y != 0.0f ? 0.0f : x;
  else if constexpr (op == BinaryOp::kFillWhere) return y != 0.0f ? s : x;
  else if constexpr (op == BinaryOp::kDivisorGrad) return -x / (y * y);
  else if constexpr (op == BinaryOp::kPowScalarGrad) return s == 0.0f ? 0.0f : x * s * powf(y, s - 1.0f);
  else if constexpr (op == BinaryOp::kPowBaseGrad) return y == 0.0f ? 0.0f : y * powf(x, y - 1.0f);
  else if constexpr (op == BinaryOp::kPowExponentGrad) return y > 0.0f ? x * logf(y) : 0.0f;
  else if constexpr (op == BinaryOp::kSqrtGrad) return 0.5f * x / y;
  else if constexpr (op == BinaryOp::kTanhGrad) return x * (1.0f - y * y);
  else if constexpr (op == BinaryOp::kSigmoidGrad) return x * y * (1.0f - y);
  else if constexpr (op == BinaryOp::kReluGrad) return y > 0.0f ? x : 0.0f;
  else {  // kGeluGrad: (g, x)
    const float cdf = 0.5f * (1.0f + erff(y * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * y * y);
    return x * (cdf + y * pdf);
  }
}

// Calls f.template operator()<op>() for the op code `op` (each code one instantiation), on the host.
template <typename F>
inline auto with_unary_op(UnaryOp op, F&& f) {
  switch (op) {
    case UnaryOp::kNeg: return f.template operator()<UnaryOp::kNeg>();
    case UnaryOp::kExp: return f.template operator()<UnaryOp::kExp>();
    case UnaryOp::kLog: return f.template operator()<UnaryOp::kLog>();
    case UnaryOp::kSqrt: return f.template operator()<UnaryOp::kSqrt>();
    case UnaryOp::kTanh: return f.template operator()<UnaryOp::kTanh>();
    case UnaryOp::kSigmoid: return f.template operator()<UnaryOp::kSigmoid>();
    case UnaryOp::kRelu: return f.template operator()<UnaryOp::kRelu>();
    case UnaryOp::kGelu: return f.template operator()<UnaryOp::kGelu>();
    case UnaryOp::kAddScalar: return f.template operator()<UnaryOp::kAddScalar>();
    case UnaryOp::kMulScalar: return f.template operator()<UnaryOp::kMulScalar>();
    case UnaryOp::kPowScalar: return f.template operator()<UnaryOp::kPowScalar>();
    case UnaryOp::kGreaterThan: return f.template operator()<UnaryOp::kGreaterThan>();
    case UnaryOp::kNonzero: break;
  }
  return f.template operator()<UnaryOp::kNonzero>();
}

template <typename F>
inline auto with_binary_op(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::kAdd: return f.template operator()<BinaryOp::kAdd>();
    case BinaryOp::kSub: return f.template operator()<BinaryOp::kSub>();
    case BinaryOp::kMul: return f.template operator()<BinaryOp::kMul>();
    case BinaryOp::kDiv: return f.template operator()<BinaryOp::kDiv>();
    case BinaryOp::kPow: return f.template operator()<BinaryOp::kPow>();
    case BinaryOp::kEqual: return f.template operator()<BinaryOp::kEqual>();
    case BinaryOp::kKeepWhere: return f.template operator()<BinaryOp::kKeepWhere>();
    case BinaryOp::kDropWhere: return f.template operator()<BinaryOp::kDropWhere>();
    case BinaryOp::kFillWhere: return f.template operator()<BinaryOp::kFillWhere>();
    case BinaryOp::kDivisorGrad: return f.template operator()<BinaryOp::kDivisorGrad>();
    case BinaryOp::kPowScalarGrad: return f.template operator()<BinaryOp::kPowScalarGrad>();
    case BinaryOp::kPowBaseGrad: return f.template operator()<BinaryOp::kPowBaseGrad>();
    case BinaryOp::kPowExponentGrad: return f.template operator()<BinaryOp::kPowExponentGrad>();
    case BinaryOp::kSqrtGrad: return f.template operator()<BinaryOp::kSqrtGrad>();
    case BinaryOp::kTanhGrad: return f.template operator()<BinaryOp::kTanhGrad>();
    case BinaryOp::kSigmoidGrad: return f.template operator()<BinaryOp::kSigmoidGrad>();
    case BinaryOp::kReluGrad: return f.template operator()<BinaryOp::kReluGrad>();
    case BinaryOp::kGeluGrad: break;
  }
  return f.template operator()<BinaryOp::kGeluGrad>();
}

}  // namespace tessera
