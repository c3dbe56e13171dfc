// The fp16 matrix product of mixed precision (autograd/autocast.h): C = alpha · fp16(A) @ fp16(B) +
// beta · C with float32 accumulation. oneDNN 2.6 has no f16 matmul on CPUs, so A and B are rounded
// to fp16 values into float32 scratch and multiplied by sgemm: each product of two fp16 values is
// exact in float32, so the result is what an fp16 kernel with fp32 accumulation computes (the sum's
// order aside), at float32's speed.
#pragma once
#include "tessera/backend/cpu/gemm.h"

namespace tessera::cpu {

void gemm_fp16(const MatrixRef& a, const MatrixRef& b, float* c, int64_t ldc, float alpha = 1.0f, float beta = 0.0f);

}  // namespace tessera::cpu
