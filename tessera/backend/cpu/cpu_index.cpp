// The CPU's indexing kernels (embedding, index_select, each with its scatter-add backward) and
// dropout's mask. Index ranges are checked here, where the indices are readable.
#include <algorithm>

#include "tessera/backend/cpu/cpu_kernels.h"
#include "tessera/ops/detail.h"

namespace tessera::cpu {

Tensor CpuKernels::embedding(const Tensor& weight, const Tensor& indices) const {
  const int64_t V = weight.shape()[0], D = weight.shape()[1], n = indices.numel();
  const int64_t* ix = indices.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TESSERA_CHECK_INDEX(ix[i] >= 0 && ix[i] < V, "[embedding] index ", ix[i], " at position ", i,
                        " is out of range for ", V, " embeddings");
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape);
  const float* w = weight.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i) std::copy(w + ix[i] * D, w + (ix[i] + 1) * D, o + i * D);
  return out;
}

Tensor CpuKernels::embedding_backward(const Tensor& g_in, const Tensor& indices, int64_t V) const {
  Tensor g = detail::as_contiguous(g_in);
  const int64_t D = g.dim() == 0 ? 1 : g.shape().back();
  Tensor grad = zeros({V, D});
  const int64_t* ix = indices.data<int64_t>();
  const float* gp = g.data<float>();
  float* dp = grad.data<float>();
  for (int64_t i = 0; i < indices.numel(); ++i)
    for (int64_t j = 0; j < D; ++j) dp[ix[i] * D + j] += gp[i * D + j];
  return grad;
}

namespace index_layout {
// t seen as (outer, n, inner) around dim d.
struct AroundDim {
  int64_t outer = 1, n, inner = 1;
  AroundDim(const Shape& shape, int64_t d) : n(shape[d]) {
    for (int64_t i = 0; i < d; ++i) outer *= shape[i];
    for (int64_t i = d + 1; i < static_cast<int64_t>(shape.size()); ++i) inner *= shape[i];
  }
};
}  // namespace index_layout

Tensor CpuKernels::index_select(const Tensor& t, int64_t d, const Tensor& indices) const {
  const index_layout::AroundDim at(t.shape(), d);
  const int64_t outer = at.outer, n = at.n, inner = at.inner, k = indices.numel();
  const int64_t* ix = indices.data<int64_t>();
  for (int64_t i = 0; i < k; ++i)
    TESSERA_CHECK_INDEX(ix[i] >= 0 && ix[i] < n, "[index_select] index ", ix[i], " is out of range for dim ", d,
                        " of size ", n);
  Shape out_shape = t.shape();
  out_shape[d] = k;
  Tensor out = Tensor::empty(out_shape);
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t i = 0; i < k; ++i)
      std::copy(src + (a * n + ix[i]) * inner, src + (a * n + ix[i] + 1) * inner, dst + (a * k + i) * inner);
  return out;
}

Tensor CpuKernels::index_select_backward(const Tensor& g_in, const Shape& in_shape, int64_t d,
                                         const Tensor& indices) const {
  const index_layout::AroundDim at(in_shape, d);
  const int64_t outer = at.outer, n = at.n, inner = at.inner, k = indices.numel();
  Tensor g = detail::as_contiguous(g_in);
  Tensor grad = zeros(in_shape);
  const int64_t* ix = indices.data<int64_t>();
  const float* gp = g.data<float>();
  float* dp = grad.data<float>();
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < inner; ++j) dp[(a * n + ix[i]) * inner + j] += gp[(a * k + i) * inner + j];
  return grad;
}

Tensor CpuKernels::dropout_mask(const Shape& shape, const Device&, float p, Generator& gen) const {
  Tensor mask = Tensor::empty(shape);
  float* m = mask.data<float>();
  const float keep_scale = p == 1.0f ? 0.0f : 1.0f / (1.0f - p);
  for (int64_t i = 0; i < mask.numel(); ++i) m[i] = gen.uniform() >= p ? keep_scale : 0.0f;
  return mask;
}

}  // namespace tessera::cpu
