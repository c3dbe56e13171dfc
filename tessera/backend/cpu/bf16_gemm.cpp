#include "tessera/backend/cpu/bf16_gemm.h"

#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "tessera/backend/cpu/onednn_matmul.h"
#include "tessera/core/cpu_allocator.h"
#include "tessera/core/dtype.h"
#include "tessera/core/half_codec.h"
#include "tessera/core/error.h"
#include "tessera/util/thread_pool.h"

namespace tessera::cpu {

namespace {

using dnnl::memory;

using onednn::engine;

memory::dims strides_of(int64_t rows, int64_t cols, bool column_major) {
  return column_major ? memory::dims{1, rows} : memory::dims{cols, 1};
}

memory::desc bias_desc(int64_t n) { return memory::desc({1, n}, memory::data_type::f32, memory::dims{n, 1}); }

// bf16 (m, k) @ bf16 (k, n) [+ f32 bias (1, n)] -> f32 (m, n) with row stride ldc, each operand in
// either orientation.
dnnl::matmul::desc matmul_desc(int64_t m, int64_t n, int64_t k, int64_t ldc, bool a_columns, bool b_columns,
                               bool with_bias = false) {
  const memory::desc a({m, k}, memory::data_type::bf16, strides_of(m, k, a_columns));
  const memory::desc b({k, n}, memory::data_type::bf16, strides_of(k, n, b_columns));
  const memory::desc c({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  return with_bias ? dnnl::matmul::desc(a, b, bias_desc(n), c) : dnnl::matmul::desc(a, b, c);
}

// One primitive per shape, layout, scaling and OpenMP team size, built once (building costs far more
// than a small product). The team size is in the key because oneDNN splits a primitive's work for the
// team it was created under: a product first built on 1 thread ran on 1 thread after
// set_num_threads(2) (the GPT's bf16 step at 2 threads was 0.67x its speed when built for 2).
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, float, float, bool, int>;  // M, N, K, ldc, layouts, alpha, beta, bias, threads

dnnl::matmul primitive_for(const Key& key) {
  static std::mutex mu;
  static std::map<Key, dnnl::matmul> cache;
  std::lock_guard lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const auto [m, n, k, ldc, a_columns, b_columns, alpha, beta, with_bias, threads] = key;
  const dnnl::primitive_attr attr = onednn::product_attr(alpha, beta);
  dnnl::matmul prim(
      dnnl::matmul::primitive_desc(matmul_desc(m, n, k, ldc, a_columns, b_columns, with_bias), attr, engine()));
  if (cache.size() >= 512) cache.clear();  // a bound, for programs of ever-new shapes
  cache.emplace(key, prim);
  return prim;
}

}  // namespace

std::string gemm_bf16_implementation(int64_t m, int64_t n, int64_t k) {
  return dnnl::matmul::primitive_desc(matmul_desc(m, n, k, n, false, false), engine()).impl_info_str();
}

Bf16Matrix::Bf16Matrix(const MatrixRef& m) : rows_(m.rows), cols_(m.cols) {
  auto values = std::static_pointer_cast<uint16_t>(
      cpu_allocator::allocate_shared(static_cast<size_t>(m.rows * m.cols) * sizeof(uint16_t)));
  column_major_ = m.col_stride != 1 && m.row_stride == 1;
  // Lines: rows, or columns of a column-major view; each converted in one vectorised pass.
  const int64_t lines = column_major_ ? m.cols : m.rows, length = column_major_ ? m.rows : m.cols;
  const int64_t line_stride = column_major_ ? m.col_stride : m.row_stride;
  const int64_t along = column_major_ ? m.row_stride : m.col_stride;
  uint16_t* dst = values.get();
  parallel_for(0, lines, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, length)), [&](int64_t lo, int64_t hi) {
    std::vector<float> gathered(along == 1 ? 0 : static_cast<size_t>(length));
    for (int64_t i = lo; i < hi; ++i) {
      const float* line = m.data + i * line_stride;
      if (along != 1) {  // neither orientation is contiguous: gather the line first
        for (int64_t j = 0; j < length; ++j) gathered[static_cast<size_t>(j)] = line[j * along];
        line = gathered.data();
      }
      encode_half(HalfFormat::Bf16, line, dst + i * length, length);
    }
  });
  values_ = std::move(values);
}

Bf16Matrix Bf16Matrix::transposed() const {
  Bf16Matrix t;
  t.values_ = values_;
  t.rows_ = cols_;
  t.cols_ = rows_;
  t.column_major_ = !column_major_;
  return t;
}

void gemm_bf16(const Bf16Matrix& a, const Bf16Matrix& b, float* c, int64_t ldc, float alpha, float beta,
               const float* bias) {
  TESSERA_ASSERT(a.cols() == b.rows(), "gemm_bf16 inner dims ", a.cols(), " vs ", b.rows());
  const int64_t M = a.rows(), N = b.cols(), K = a.cols();
  if (M == 0 || N == 0) return;
  // (oneDNN 2.x scales the bias with the product, which nothing here wants.)
  TESSERA_ASSERT(bias == nullptr || (beta == 0.0f && alpha == 1.0f), "gemm_bf16 takes a bias or alpha and beta, not both");
  if (K == 0) {  // as gemm: C = beta · C (or the bias in every row)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        c[i * ldc + j] = bias != nullptr ? bias[j] : beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  dnnl::matmul prim = primitive_for(
      {M, N, K, ldc, a.column_major_, b.column_major_, alpha, beta, bias != nullptr, omp_get_max_threads()});
  memory am({{M, K}, memory::data_type::bf16, strides_of(M, K, a.column_major_)}, engine(),
            const_cast<uint16_t*>(a.values_.get()));
  memory bm({{K, N}, memory::data_type::bf16, strides_of(K, N, b.column_major_)}, engine(),
            const_cast<uint16_t*>(b.values_.get()));
  memory cm({{M, N}, memory::data_type::f32, memory::dims{ldc, 1}}, engine(), c);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(bias_desc(N), engine(), const_cast<float*>(bias)));
  dnnl::stream stream(engine());
  prim.execute(stream, args);
  stream.wait();
}

}  // namespace tessera::cpu
