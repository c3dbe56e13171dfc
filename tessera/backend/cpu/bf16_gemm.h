// The bf16 matrix product of mixed precision (autograd/autocast.h): C = alpha · bf16(A) @ bf16(B) +
// beta · C with float32 accumulation and output, on oneDNN's matmul, which on AVX-512 BF16 CPUs
// runs `vdpbf16ps` kernels (Debian's oneDNN 2.6 picks them by CPU at run time; ONEDNN_VERBOSE=1
// prints the implementation chosen). A and B are rounded to bf16 (nearest even) into scratch
// buffers first, whatever their strides.
#pragma once
#include <cstdint>
#include <string>

#include "tessera/backend/cpu/gemm.h"

namespace tessera::cpu {

void gemm_bf16(const MatrixRef& a, const MatrixRef& b, float* c, int64_t ldc, float alpha = 1.0f, float beta = 0.0f);

// The oneDNN implementation an (m, k) @ (k, n) product runs on here, e.g. "brg:avx512_core_amx_bf16"
// (AMX tiles) or "brg:avx512_core_bf16" (vdpbf16ps): for the benchmark's report.
std::string gemm_bf16_implementation(int64_t m, int64_t n, int64_t k);

}  // namespace tessera::cpu
