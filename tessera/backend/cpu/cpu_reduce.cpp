// The CPU's reductions. Every reduction is brought to one of two layouts over a contiguous buffer:
//   rows    (M kept, R reduced): out[m] = reduce(in[m, :])    — reduced dims innermost
//   columns (R reduced, M kept): out[m] = reduce(in[:, m])    — reduced dims outermost (bias grads)
// anything else is permuted into the rows layout first (one copy).
#include <algorithm>
#include <cmath>

#include "tessera/backend/cpu/cpu_kernels.h"
#include "tessera/ops/detail.h"
#include "tessera/util/thread_pool.h"

namespace tessera::cpu {

namespace reduction_layout {

struct ReductionPlan {
  Tensor input;        // contiguous
  int64_t M, R;        // kept and reduced element counts
  bool reduced_outer;  // columns layout
};

ReductionPlan plan_reduction(const Tensor& t, const Shape& dims) {
  int64_t nd = t.dim();
  std::vector<bool> is_reduced(nd, false);
  for (int64_t d : dims) is_reduced[d] = true;
  int64_t M = 1, R = 1;
  for (int64_t i = 0; i < nd; ++i) (is_reduced[i] ? R : M) *= t.shape()[i];
  int64_t k = static_cast<int64_t>(dims.size());
  bool trailing = true, leading = true;
  for (int64_t i = 0; i < nd; ++i) {
    if (is_reduced[i] != (i >= nd - k)) trailing = false;
    if (is_reduced[i] != (i < k)) leading = false;
  }
  if (t.is_contiguous() && trailing) return {t, M, R, false};
  if (t.is_contiguous() && leading) return {t, M, R, true};
  Shape order;
  for (int64_t i = 0; i < nd; ++i)
    if (!is_reduced[i]) order.push_back(i);
  for (int64_t d : dims) order.push_back(d);
  NoGradGuard no_grad;
  return {contiguous(permute(t, order)), M, R, false};
}

}  // namespace reduction_layout

using reduction_layout::plan_reduction;
using reduction_layout::ReductionPlan;

Tensor CpuKernels::sum(const Tensor& t, const Shape& dims, bool keepdim) const {
  ReductionPlan p = plan_reduction(t, dims);
  Tensor out = zeros(detail::reduced_shape(t.shape(), dims, keepdim));
  float* o = out.data<float>();
  const float* in = p.input.data<float>();
  const int64_t M = p.M, R = p.R;
  if (p.reduced_outer) {
    parallel_for(0, M, std::max<int64_t>(1, 32768 / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = 0; r < R; ++r) {
        const float* row = in + r * M;
        for (int64_t m = b; m < e; ++m) o[m] += row[m];
      }
    });
  } else {
    parallel_for(0, M, std::max<int64_t>(1, 32768 / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      for (int64_t m = b; m < e; ++m) {
        const float* row = in + m * R;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t r = 0; r < R; ++r) acc += row[r];
        o[m] = acc;
      }
    });
  }
  return out;
}

MaxResult CpuKernels::max(const Tensor& t, int64_t d, bool keepdim) const {
  Shape dims{d};
  ReductionPlan p = plan_reduction(t, dims);
  Shape out_shape = detail::reduced_shape(t.shape(), dims, keepdim);
  Tensor values = Tensor::empty(out_shape), indices = Tensor::empty(out_shape, DType::Int64);
  float* v = values.data<float>();
  int64_t* ix = indices.data<int64_t>();
  const float* in = p.input.data<float>();
  const int64_t M = p.M, R = p.R;
  for (int64_t m = 0; m < M; ++m) {
    auto at = [&](int64_t r) { return p.reduced_outer ? in[r * M + m] : in[m * R + r]; };
    float best = at(0);
    int64_t arg = 0;
    for (int64_t r = 1; r < R && !std::isnan(best); ++r) {
      float x = at(r);
      if (x > best || std::isnan(x)) {
        best = x;
        arg = r;
      }
    }
    v[m] = best;
    ix[m] = arg;
  }
  return {values, indices};
}

Tensor CpuKernels::max_backward(const Tensor& g, const Tensor& indices, const Shape& in_shape, int64_t d,
                                bool keepdim) const {
  Tensor grad = zeros(in_shape);
  Tensor gk = keepdim ? g : unsqueeze(g, d);
  Tensor ik = keepdim ? indices : unsqueeze(indices, d);
  Tensor gc = contiguous(gk), ic = contiguous(ik);
  int64_t outer = 1, inner = 1, n = in_shape[d];
  for (int64_t i = 0; i < d; ++i) outer *= in_shape[i];
  for (int64_t i = d + 1; i < static_cast<int64_t>(in_shape.size()); ++i) inner *= in_shape[i];
  float* gp = grad.data<float>();
  const float* gv = gc.data<float>();
  const int64_t* iv = ic.data<int64_t>();
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t b = 0; b < inner; ++b) gp[(a * n + iv[a * inner + b]) * inner + b] += gv[a * inner + b];
  return grad;
}

double CpuKernels::squared_norm(const Tensor& t_in) const {
  const Tensor t = detail::as_contiguous(t_in);
  const float* x = t.data<float>();
  double s = 0.0;  // in double: a layer's norm sums up to millions of squares
  for (int64_t k = 0; k < t.numel(); ++k) s += static_cast<double>(x[k]) * x[k];
  return s;
}

}  // namespace tessera::cpu
