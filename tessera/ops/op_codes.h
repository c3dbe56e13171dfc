// The op codes of the kernel table's elementwise kernels (kernels.h): one code per formula, so that
// one templated loop on the CPU and one templated CUDA kernel serve them all. Plain C++ (no tensor
// header), as the CUDA sources compile it too.
#pragma once
#include <cstdint>

namespace tessera {

enum class UnaryOp : uint8_t {
  kNeg, kExp, kLog, kSqrt, kTanh, kSigmoid, kRelu, kGelu,  // gelu: the exact (erf) form
  kAddScalar, kMulScalar, kPowScalar,                       // x + s, x * s, x ^ s
  kGreaterThan,                                             // x > s ? 1 : 0
  kNonzero,                                                 // x != 0 ? 1 : 0
};

enum class BinaryOp : uint8_t {
  kAdd, kSub, kMul, kDiv, kPow,
  kEqual,                               // x == y ? 1 : 0
  kKeepWhere, kDropWhere, kFillWhere,   // (x, mask): mask ? x : 0, mask ? 0 : x, mask ? s : x
  // Backward formulas, (upstream gradient or a product with it, a saved value):
  kDivisorGrad,      // (g·a, b)      -g·a / b²
  kPowScalarGrad,    // (g, x)        g · s · x^(s-1), 0 where s = 0
  kPowBaseGrad,      // (x, e)        e · x^(e-1), 0 where e = 0
  kPowExponentGrad,  // (out, x)      out · log x where x > 0, else 0
  kSqrtGrad,         // (g, out)      g / (2 out)
  kTanhGrad,         // (g, out)      g (1 - out²)
  kSigmoidGrad,      // (g, out)      g out (1 - out)
  kReluGrad,         // (g, out)      out > 0 ? g : 0
  kGeluGrad,         // (g, x)        g (Φ(x) + x φ(x))
};

}  // namespace tessera
