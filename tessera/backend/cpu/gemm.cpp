#include "tessera/backend/cpu/gemm.h"

#include <cblas.h>

#include "tessera/core/error.h"

namespace tessera::cpu {

namespace {
struct BlasOperand {
  CBLAS_TRANSPOSE trans;
  blasint ld;
};

BlasOperand blas_operand(const MatrixRef& m) {
  if (m.col_stride == 1 && m.row_stride >= std::max<int64_t>(1, m.cols)) return {CblasNoTrans, static_cast<blasint>(m.row_stride)};
  if (m.row_stride == 1 && m.col_stride >= std::max<int64_t>(1, m.rows)) return {CblasTrans, static_cast<blasint>(m.col_stride)};
  // Degenerate shapes (a single row or column) with an arbitrary other stride.
  if (m.rows == 1 && m.col_stride == 1) return {CblasNoTrans, static_cast<blasint>(std::max<int64_t>(1, m.cols))};
  if (m.cols == 1 && m.row_stride == 1) return {CblasTrans, static_cast<blasint>(std::max<int64_t>(1, m.rows))};
  return {CblasNoTrans, -1};
}
}  // namespace

bool blas_compatible(const MatrixRef& m) { return blas_operand(m).ld > 0; }

void gemm(const MatrixRef& a, const MatrixRef& b, float* c, int64_t ldc, float alpha, float beta) {
  TESSERA_ASSERT(a.cols == b.rows, "gemm inner dims ", a.cols, " vs ", b.rows);
  const int64_t M = a.rows, N = b.cols, K = a.cols;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  BlasOperand oa = blas_operand(a), ob = blas_operand(b);
  TESSERA_ASSERT(oa.ld > 0 && ob.ld > 0, "gemm operand is not BLAS-compatible");
  cblas_sgemm(CblasRowMajor, oa.trans, ob.trans, static_cast<blasint>(M), static_cast<blasint>(N),
              static_cast<blasint>(K), alpha, a.data, oa.ld, b.data, ob.ld, beta, c, static_cast<blasint>(ldc));
}

}  // namespace tessera::cpu
