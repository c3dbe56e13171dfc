#include "tessera/backend/cpu/fp16_gemm.h"

#include <vector>

#include "tessera/core/half_codec.h"

namespace tessera::cpu {

namespace {

// Row-major copy of a strided view, its values rounded to fp16.
std::vector<float> rounded_to_fp16(const MatrixRef& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows; ++i) {
    const float* row = m.data + i * m.row_stride;
    float* dst = out.data() + i * m.cols;
    if (m.col_stride == 1) {
      round_through_half(HalfFormat::Fp16, row, dst, m.cols);
    } else {
      for (int64_t j = 0; j < m.cols; ++j) dst[j] = row[j * m.col_stride];
      round_through_half(HalfFormat::Fp16, dst, dst, m.cols);
    }
  }
  return out;
}

}  // namespace

void gemm_fp16(const MatrixRef& a, const MatrixRef& b, float* c, int64_t ldc, float alpha, float beta) {
  const std::vector<float> a16 = rounded_to_fp16(a), b16 = rounded_to_fp16(b);
  gemm({a16.data(), a.rows, a.cols, a.cols, 1}, {b16.data(), b.rows, b.cols, b.cols, 1}, c, ldc, alpha, beta);
}

}  // namespace tessera::cpu
