// The bf16 matrix product of mixed precision (autograd/autocast.h): C = alpha · bf16(A) @ bf16(B) +
// beta · C with float32 accumulation and output, on oneDNN's matmul, which on AVX-512 BF16 CPUs
// runs `vdpbf16ps` kernels (Debian's oneDNN 2.6 picks them by CPU at run time; ONEDNN_VERBOSE=1
// prints the implementation chosen). A and B are rounded to bf16 (nearest even) into scratch
// buffers first, whatever their strides.
#pragma once
#include <cstdint>

#include "tessera/backend/cpu/gemm.h"

namespace tessera::cpu {

void gemm_bf16(const MatrixRef& a, const MatrixRef& b, float* c, int64_t ldc, float alpha = 1.0f, float beta = 0.0f);

}  // namespace tessera::cpu
