// The bf16 matrix product of mixed precision (autograd/autocast.h): C = alpha · bf16(A) @ bf16(B) +
// beta · C with float32 accumulation and output, on oneDNN's matmul, which on AVX-512 BF16 CPUs
// runs `vdpbf16ps` kernels, and AMX tiles where the CPU has them (Debian's oneDNN 2.6 picks by CPU
// at run time; ONEDNN_VERBOSE=1 prints the implementation chosen). The operands are Bf16Matrix:
// float32 views rounded to bf16 (nearest even) once, whatever their strides.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/backend/cpu/gemm.h"
#include "tessera/core/dtype.h"

namespace tessera::cpu {

// A matrix rounded to bf16 once, to be multiplied several times: linear's forward operands x and w
// are its backward's too, and the output gradient enters both backward products, so keeping them
// converts 3 matrices where converting per product took 6. Kept in the orientation of the view it
// came from (row- or column-major, whichever reads memory in order).
class Bf16Matrix {
 public:
  explicit Bf16Matrix(const MatrixRef& m);
  // The same values read as the transpose: no copy.
  Bf16Matrix transposed() const;
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

 private:
  Bf16Matrix() = default;
  friend void gemm_bf16(const Bf16Matrix& a, const Bf16Matrix& b, float* c, int64_t ldc, float alpha, float beta,
                        const float* bias);
  // bf16 bit patterns, from the tensor allocator (counted, budgeted and cached as activations are)
  // and not zero-filled: a std::vector's zero fill was 9% of the MLP's bf16 step at 2 threads, on
  // one thread, before the conversion overwrote every element.
  std::shared_ptr<const uint16_t> values_;
  int64_t rows_ = 0, cols_ = 0;
  bool column_major_ = false;
};

// With `bias` (b.cols() floats), oneDNN adds it to every row of the product as it writes C, in place
// of beta · C: a linear layer's bias needs no broadcast copy into C first.
void gemm_bf16(const Bf16Matrix& a, const Bf16Matrix& b, float* c, int64_t ldc, float alpha = 1.0f, float beta = 0.0f,
               const float* bias = nullptr);

// The oneDNN implementation an (m, k) @ (k, n) product runs on here, e.g. "brg:avx512_core_amx_bf16"
// (AMX tiles) or "brg:avx512_core_bf16" (vdpbf16ps): for the benchmark's report.
std::string gemm_bf16_implementation(int64_t m, int64_t n, int64_t k);

}  // namespace tessera::cpu
