// C (m, n) = A (m, k) · B (k, n) on a device, row-major, through cuBLASLt, with C in float32.
// The CPU function it must equal is cpu::gemm (backend/cpu/gemm.h); tests/backend/cuda/gemm_test.cpp
// compares the two within each precision's rounding.
#pragma once
#include <cstdint>

#include "tessera/backend/cuda/device_buffer.h"

namespace tessera::cuda {

enum class GemmPrecision {
  kFloat32,        // float32 in, float32 products (CUBLAS_COMPUTE_32F)
  kTensorFloat32,  // float32 in, products on the tensor cores with 10-bit mantissas (PyTorch's allow_tf32)
  kBFloat16,       // bfloat16 in (as float_to_bfloat16 writes it), float32 accumulation and out
};
inline const char* gemm_precision_name(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::kFloat32: return "fp32";
    case GemmPrecision::kTensorFloat32: return "tf32";
    case GemmPrecision::kBFloat16: return "bf16";
  }
  return "?";
}

// Bytes one element of A or B takes at `precision`.
inline size_t gemm_input_element_size(GemmPrecision precision) { return precision == GemmPrecision::kBFloat16 ? 2 : 4; }

// A, B and C on one device, large enough for their shapes (ValueError otherwise, naming the operand).
// Queued on the device's default stream: synchronize() before reading C on the host.
void gemm(GemmPrecision precision, const DeviceBuffer& a, const DeviceBuffer& b, DeviceBuffer& c, int64_t m, int64_t n,
          int64_t k);

}  // namespace tessera::cuda
