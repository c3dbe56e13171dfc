#include "tessera/backend/cpu/bf16_gemm.h"

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/util/thread_pool.h"

namespace tessera::cpu {

namespace {

using dnnl::memory;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// bf16 (m, k) @ bf16 (k, n) -> f32 (m, n) with row stride ldc: the one shape of every product here.
dnnl::matmul::desc matmul_desc(int64_t m, int64_t n, int64_t k, int64_t ldc) {
  return dnnl::matmul::desc(memory::desc({m, k}, memory::data_type::bf16, memory::dims{k, 1}),
                            memory::desc({k, n}, memory::data_type::bf16, memory::dims{n, 1}),
                            memory::desc({m, n}, memory::data_type::f32, memory::dims{ldc, 1}));
}

// One primitive per shape and scaling, built once (building costs far more than a small product).
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, float, float>;  // M, N, K, ldc, alpha, beta

dnnl::matmul primitive_for(const Key& key) {
  static std::mutex mu;
  static std::map<Key, dnnl::matmul> cache;
  std::lock_guard lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const auto [m, n, k, ldc, alpha, beta] = key;
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  dnnl::matmul prim(dnnl::matmul::primitive_desc(matmul_desc(m, n, k, ldc), attr, engine()));
  if (cache.size() >= 512) cache.clear();  // a bound, for programs of ever-new shapes
  cache.emplace(key, prim);
  return prim;
}

// Row-major bf16 copy of a strided float view.
std::vector<BFloat16> to_bf16(const MatrixRef& m) {
  std::vector<BFloat16> out(static_cast<size_t>(m.rows * m.cols));
  parallel_for(0, m.rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, m.cols)), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = m.data + i * m.row_stride;
      BFloat16* dst = out.data() + i * m.cols;
      for (int64_t j = 0; j < m.cols; ++j) dst[j] = float_to_bf16(row[j * m.col_stride]);
    }
  });
  return out;
}

}  // namespace

std::string gemm_bf16_implementation(int64_t m, int64_t n, int64_t k) {
  return dnnl::matmul::primitive_desc(matmul_desc(m, n, k, n), engine()).impl_info_str();
}

void gemm_bf16(const MatrixRef& a, const MatrixRef& b, float* c, int64_t ldc, float alpha, float beta) {
  TESSERA_ASSERT(a.cols == b.rows, "gemm_bf16 inner dims ", a.cols, " vs ", b.rows);
  const int64_t M = a.rows, N = b.cols, K = a.cols;
  if (M == 0 || N == 0) return;
  if (K == 0) {  // as gemm: C = beta · C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  std::vector<BFloat16> a16 = to_bf16(a), b16 = to_bf16(b);
  dnnl::matmul prim = primitive_for({M, N, K, ldc, alpha, beta});
  memory am({{M, K}, memory::data_type::bf16, memory::dims{K, 1}}, engine(), a16.data());
  memory bm({{K, N}, memory::data_type::bf16, memory::dims{N, 1}}, engine(), b16.data());
  memory cm({{M, N}, memory::data_type::f32, memory::dims{ldc, 1}}, engine(), c);
  dnnl::stream stream(engine());
  prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
}

}  // namespace tessera::cpu
