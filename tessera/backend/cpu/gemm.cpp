#include "tessera/backend/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "tessera/backend/cpu/onednn_matmul.h"
#include "tessera/core/error.h"
#include "tessera/util/settings.h"

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

bool use_onednn() {
  static const bool onednn = [] {
    const char* v = env_setting("TESSERA_GEMM");
    if (v == nullptr || std::strcmp(v, "onednn") == 0) return true;
    if (std::strcmp(v, "openblas") == 0) return false;
    throw ValueError(tessera::detail::concat("TESSERA_GEMM must be onednn or openblas, got '", v, "'"));
  }();
  return onednn;
}

void blas_gemm(const MatrixRef& a, const BlasOperand& oa, const MatrixRef& b, const BlasOperand& ob, float* c,
               int64_t ldc, float alpha, float beta) {
  cblas_sgemm(CblasRowMajor, oa.trans, ob.trans, static_cast<blasint>(a.rows), static_cast<blasint>(b.cols),
              static_cast<blasint>(a.cols), alpha, a.data, oa.ld, b.data, ob.ld, beta, c, static_cast<blasint>(ldc));
}

// ---- oneDNN -----------------------------------------------------------------------------------
// (In a namespace of its own: the unity build puts bf16_gemm.cpp's helpers in the same file.)
namespace f32 {

using dnnl::memory;

using onednn::engine;

// An operand's layout: (batch,) rows x cols, row-major with leading dimension ld, or column-major
// (a transposed view) with leading dimension ld; items `step` elements apart.
memory::desc operand_desc(int64_t batch, int64_t rows, int64_t cols, bool column_major, int64_t ld, int64_t step) {
  memory::dims strides = column_major ? memory::dims{1, ld} : memory::dims{ld, 1};
  if (batch == 1) return memory::desc({rows, cols}, memory::data_type::f32, strides);
  return memory::desc({batch, rows, cols}, memory::data_type::f32, memory::dims{step, strides[0], strides[1]});
}

// batch, M, N, K; A column-major, lda, A step; B column-major, ldb, B step; ldc, C step; alpha, beta;
// a bias; the OpenMP team size (oneDNN splits a primitive's work for the team it was built under;
// see bf16_gemm.cpp).
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, int64_t, int64_t, bool, int64_t, int64_t, int64_t,
                       int64_t, float, float, bool, int>;

// A primitive with its arguments, whose data pointers change from call to call.
struct Product {
  dnnl::matmul primitive;
  memory a, b, c, bias;
  std::unordered_map<int, memory> args;
};

// Built once per shape, layout and team size, per thread: building costs far more than a small
// product, and a thread's own primitives and memory objects need no lock to re-point.
Product& product_for(const Key& key) {
  thread_local std::map<Key, Product> cache;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const auto [batch, m, n, k, a_cols, lda, a_step, b_cols, ldb, b_step, ldc, c_step, alpha, beta, with_bias, threads] =
      key;
  const dnnl::primitive_attr attr = onednn::product_attr(alpha, beta);
  const memory::desc ad = operand_desc(batch, m, k, a_cols, lda, a_step);
  const memory::desc bd = operand_desc(batch, k, n, b_cols, ldb, b_step);
  const memory::desc cd = operand_desc(batch, m, n, false, ldc, c_step);
  const memory::desc biasd({1, n}, memory::data_type::f32, memory::dims{n, 1});
  Product p;
  p.primitive = dnnl::matmul(dnnl::matmul::primitive_desc(
      with_bias ? dnnl::matmul::desc(ad, bd, biasd, cd) : dnnl::matmul::desc(ad, bd, cd), attr, engine()));
  p.a = memory(ad, engine(), DNNL_MEMORY_NONE);
  p.b = memory(bd, engine(), DNNL_MEMORY_NONE);
  p.c = memory(cd, engine(), DNNL_MEMORY_NONE);
  p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
  if (with_bias) {
    p.bias = memory(biasd, engine(), DNNL_MEMORY_NONE);
    p.args.emplace(DNNL_ARG_BIAS, p.bias);
  }
  if (cache.size() >= 256) cache.clear();  // a bound, for programs of ever-new shapes
  return cache.emplace(key, std::move(p)).first->second;
}

void onednn_gemm(const MatrixRef& a, const BlasOperand& oa, int64_t a_step, const MatrixRef& b, const BlasOperand& ob,
                 int64_t b_step, float* c, int64_t ldc, int64_t c_step, int64_t batch, float alpha, float beta,
                 const float* bias = nullptr) {
  Product& p = product_for({batch, a.rows, b.cols, a.cols, oa.trans == CblasTrans, oa.ld, a_step, ob.trans == CblasTrans,
                            ob.ld, b_step, ldc, c_step, alpha, beta, bias != nullptr, omp_get_max_threads()});
  p.a.set_data_handle(const_cast<float*>(a.data));
  p.b.set_data_handle(const_cast<float*>(b.data));
  p.c.set_data_handle(c);
  if (bias != nullptr) p.bias.set_data_handle(const_cast<float*>(bias));
  thread_local dnnl::stream stream(engine());
  p.primitive.execute(stream, p.args);
  stream.wait();
}

}  // namespace f32

// C = beta · C for an empty inner dimension.
void scale_only(int64_t M, int64_t N, float* c, int64_t ldc, float beta) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

// A and B as BLAS and oneDNN take them, once their shapes are checked to agree.
std::pair<BlasOperand, BlasOperand> operands_of(const MatrixRef& a, const MatrixRef& b) {
  TESSERA_ASSERT(a.cols == b.rows, "gemm inner dims ", a.cols, " vs ", b.rows);
  BlasOperand oa = blas_operand(a), ob = blas_operand(b);
  TESSERA_ASSERT(oa.ld > 0 && ob.ld > 0, "gemm operand is not BLAS-compatible");
  return {oa, ob};
}

}  // namespace

bool blas_compatible(const MatrixRef& m) { return blas_operand(m).ld > 0; }

void gemm(const MatrixRef& a, const MatrixRef& b, float* c, int64_t ldc, float alpha, float beta) {
  const auto [oa, ob] = operands_of(a, b);
  const int64_t M = a.rows, N = b.cols, K = a.cols;
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_only(M, N, c, ldc, beta);
  if (use_onednn()) return f32::onednn_gemm(a, oa, 0, b, ob, 0, c, ldc, 0, 1, alpha, beta);
  blas_gemm(a, oa, b, ob, c, ldc, alpha, beta);
}

void gemm_bias(const MatrixRef& a, const MatrixRef& b, const float* bias, float* c, int64_t ldc) {
  const auto [oa, ob] = operands_of(a, b);
  const int64_t M = a.rows, N = b.cols, K = a.cols;
  if (M == 0 || N == 0) return;
  if (use_onednn() && K > 0) return f32::onednn_gemm(a, oa, 0, b, ob, 0, c, ldc, 0, 1, 1.0f, 0.0f, bias);
  for (int64_t i = 0; i < M; ++i) std::memcpy(c + i * ldc, bias, static_cast<size_t>(N) * sizeof(float));
  if (K > 0) blas_gemm(a, oa, b, ob, c, ldc, 1.0f, 1.0f);
}

void gemm_batched(const MatrixRef& a, int64_t a_step, const MatrixRef& b, int64_t b_step, float* c, int64_t ldc,
                  int64_t c_step, int64_t batch, float alpha, float beta) {
  const auto [oa, ob] = operands_of(a, b);
  const int64_t M = a.rows, N = b.cols, K = a.cols;
  if (batch == 0 || M == 0 || N == 0) return;
  // One primitive when every item has its own memory (oneDNN takes no zero or overlapping steps):
  // an item spans ld times its rows (row-major) or its columns (a transposed view).
  const bool one_primitive = use_onednn() && K > 0 && batch > 1 && c_step >= M * ldc &&
                             (oa.trans == CblasNoTrans ? oa.ld * M : oa.ld * K) <= a_step &&
                             (ob.trans == CblasNoTrans ? ob.ld * K : ob.ld * N) <= b_step;
  if (one_primitive) return f32::onednn_gemm(a, oa, a_step, b, ob, b_step, c, ldc, c_step, batch, alpha, beta);
  for (int64_t i = 0; i < batch; ++i) {
    MatrixRef ai = a, bi = b;
    ai.data += i * a_step;
    bi.data += i * b_step;
    gemm(ai, bi, c + i * c_step, ldc, alpha, beta);
  }
}

}  // namespace tessera::cpu
