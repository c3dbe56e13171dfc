// Matrix products on a device through cuBLASLt, with C in float32. Two ways in: gemm() over
// DeviceBuffers (the benchmark's and the first tests'), and gemm_batched() over raw device pointers
// with strided, transposed and broadcast operands, a bias epilogue and float16 inputs (the kernel
// table's matmul and linear, backend/cuda/cuda_kernels.cpp). The CPU functions they must equal are
// cpu::gemm and cpu::gemm_batched (backend/cpu/gemm.h); tests/backend/cuda/gemm_test.cpp and
// matmul_test.cpp compare them within each precision's rounding.
#pragma once
#include <cstdint>

#include "tessera/backend/cuda/device_buffer.h"

namespace tessera::cuda {

enum class GemmPrecision {
  kFloat32,        // float32 in, float32 products (CUBLAS_COMPUTE_32F)
  kTensorFloat32,  // float32 in, products on the tensor cores with 10-bit mantissas (PyTorch's allow_tf32)
  kBFloat16,       // bfloat16 in (as float_to_bfloat16 writes it), float32 accumulation and out
  kFloat16,        // IEEE float16 in, float32 accumulation and out (autocast to float16)
};
inline const char* gemm_precision_name(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::kFloat32: return "fp32";
    case GemmPrecision::kTensorFloat32: return "tf32";
    case GemmPrecision::kBFloat16: return "bf16";
    case GemmPrecision::kFloat16: return "fp16";
  }
  return "?";
}

// Bytes one element of A or B takes at `precision`.
inline size_t gemm_input_element_size(GemmPrecision precision) {
  return precision == GemmPrecision::kBFloat16 || precision == GemmPrecision::kFloat16 ? 2 : 4;
}

// A, B and C on one device, large enough for their shapes (ValueError otherwise, naming the operand).
// Queued on the device's compute stream: synchronize() before reading C on the host.
void gemm(GemmPrecision precision, const DeviceBuffer& a, const DeviceBuffer& b, DeviceBuffer& c, int64_t m, int64_t n,
          int64_t k);

// One operand of a batched product: `rows` × `cols` matrices, element (r, c) of item i at
// data + i·batch_step + r·ld + c (row-major) or + c·ld + r (column-major: a transposed view, read
// without a copy). batch_step 0 gives every item the same matrix (a broadcast operand).
struct GemmOperand {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t ld = 0;
  bool column_major = false;
  int64_t batch_step = 0;
};

// C[i] (n, m) = A[i] (n, k) · B[i] (k, m) (+ bias (m) in every row, where not null) for i < batch,
// C row-major and contiguous (item i at c + i·n·m). Elements of A and B in the precision's input
// type; bias and C float32. Queued on the device's compute stream. The algorithm cuBLASLt's
// heuristic picks for a shape is remembered, so a training step's repeated shapes ask once.
void gemm_batched(int device, GemmPrecision precision, const GemmOperand& a, const GemmOperand& b, float* c,
                  int64_t batch, const float* bias);

}  // namespace tessera::cuda
