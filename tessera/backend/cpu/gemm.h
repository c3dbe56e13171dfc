// Row-major sgemm through OpenBLAS, taking strided 2-D views directly: a transposed view becomes a
// transpose flag rather than a copy (the backward of linear uses Wᵀ and xᵀ this way).
#pragma once
#include <cstdint>

namespace tessera::cpu {

// A 2-D operand: element (i, j) is at data[i * row_stride + j * col_stride].
struct MatrixRef {
  const float* data;
  int64_t rows, cols;
  int64_t row_stride, col_stride;
};

// True when `m` can be passed to BLAS without a copy (one of its strides is 1).
bool blas_compatible(const MatrixRef& m);

// C (M, N, leading dimension ldc) = alpha * A (M, K) @ B (K, N) + beta * C.
void gemm(const MatrixRef& a, const MatrixRef& b, float* c, int64_t ldc, float alpha = 1.0f, float beta = 0.0f);

}  // namespace tessera::cpu
