// Row-major float32 GEMM, taking strided 2-D views directly: a transposed view becomes a transpose
// flag (a column-major operand) rather than a copy (the backward of linear uses Wᵀ and xᵀ this way).
// oneDNN's matmul by default, OpenBLAS's sgemm with TESSERA_GEMM=openblas. oneDNN's is faster on
// every product the benchmarks' models make here (AMD EPYC, AVX-512; best of 5 per shape, primitives
// built once): 1 thread 1.05-1.18x on the linear layers of the MLP and the GPT (e.g. 64x784 @ 784x512:
// 105.6 against 91.2 GFLOP/s), 2 threads 1.10-1.25x; attention's 64 products of 128x64 @ 64x128 as one
// batched primitive 1.3x (1 thread) and 2.2x (2 threads) OpenBLAS's 64 calls. OpenBLAS zeroes C in a
// pass of its own before accumulating into it (sgemm_beta: 5% of the GPT's step) and splits each
// small product across the threads.
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

// C (M, N) = A (M, K) @ B (K, N) + bias (N) in every row: oneDNN adds the bias as it writes C (no
// pass of its own); OpenBLAS gets the bias copied into C's rows first and beta 1.
void gemm_bias(const MatrixRef& a, const MatrixRef& b, const float* bias, float* c, int64_t ldc);

// `batch` products at once: item i multiplies a (shifted by i * a_step elements) by b (shifted by
// i * b_step) into c + i * c_step. One oneDNN primitive for the lot (see above); a loop of gemm()
// under TESSERA_GEMM=openblas.
void gemm_batched(const MatrixRef& a, int64_t a_step, const MatrixRef& b, int64_t b_step, float* c, int64_t ldc,
                  int64_t c_step, int64_t batch, float alpha = 1.0f, float beta = 0.0f);

}  // namespace tessera::cpu
