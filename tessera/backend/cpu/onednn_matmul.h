// What tessera's two oneDNN matmul paths share (float32 in gemm.cpp, bf16 in bf16_gemm.cpp): the CPU
// engine, and C = alpha · A @ B + beta · C as a primitive's attributes.
#pragma once
#include "oneapi/dnnl/dnnl.hpp"

namespace tessera::cpu::onednn {

inline dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// alpha scales the product (oneDNN 2.x output scales); beta != 0 adds beta · C (a sum post-op).
inline dnnl::primitive_attr product_attr(float alpha, float beta) {
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return attr;
}

}  // namespace tessera::cpu::onednn
