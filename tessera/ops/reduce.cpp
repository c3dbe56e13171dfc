// Reductions. Every reduction is brought to one of two layouts over a contiguous buffer:
//   rows    (M kept, R reduced): out[m] = reduce(in[m, :])    — reduced dims innermost
//   columns (R reduced, M kept): out[m] = reduce(in[:, m])    — reduced dims outermost (bias grads)
// anything else is permuted into the rows layout first (one copy).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/ops/detail.h"
#include "tessera/util/thread_pool.h"

namespace tessera {

using autograd::record;

namespace {

struct ReductionPlan {
  Tensor input;      // contiguous
  int64_t M, R;      // kept and reduced element counts
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

Tensor sum_impl(const Tensor& t, const Shape& dims, bool keepdim) {
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

// Gradient of a sum: g broadcast back over the reduced dims.
Tensor expand_reduced_grad(const Tensor& g, const Shape& in_shape, const Shape& dims, bool keepdim) {
  Shape kept_shape = detail::reduced_shape(in_shape, dims, true);
  return expand(reshape(g, kept_shape), in_shape);  // a stride-0 view: consumers read it in place
}

}  // namespace

Tensor sum(const Tensor& t, const Shape& dims_in, bool keepdim) {
  detail::check_float(t, "sum", "t");
  Shape dims = detail::normalize_dims(dims_in, t.dim(), "sum");
  Tensor out = sum_impl(t, dims, keepdim);
  Shape in_shape = t.shape();
  return record(out, "SumBackward", {t}, [in_shape, dims, keepdim](const Tensor& g) {
    return std::vector<Tensor>{expand_reduced_grad(g, in_shape, dims, keepdim)};
  }, autograd::Saves::Nothing);
}

Tensor sum(const Tensor& t) { return sum(t, Shape{}, false); }

Tensor mean(const Tensor& t, const Shape& dims_in, bool keepdim) {
  detail::check_float(t, "mean", "t");
  Shape dims = detail::normalize_dims(dims_in, t.dim(), "mean");
  int64_t R = 1;
  for (int64_t d : dims) R *= t.shape()[d];
  TESSERA_CHECK(R > 0, "[mean] mean over an empty dimension of shape ", shape_str(t.shape()));
  return mul(sum(t, dims, keepdim), 1.0f / static_cast<float>(R));
}

Tensor mean(const Tensor& t) { return mean(t, Shape{}, false); }

MaxResult max(const Tensor& t, int64_t dim, bool keepdim) {
  detail::check_float(t, "max", "t");
  TESSERA_CHECK(t.dim() > 0, "[max] needs at least one dim, got a 0-dim tensor");
  int64_t d = normalize_dim(dim, t.dim(), "max");
  TESSERA_CHECK(t.shape()[d] > 0, "[max] cannot take the max over dim ", d, " of size 0 (shape ",
                shape_str(t.shape()), ")");
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
  Shape in_shape = t.shape();
  Tensor saved_idx = indices;
  Tensor out = record(values, "MaxBackward", {t}, [in_shape, d, keepdim, saved_idx](const Tensor& g) {
    // Scatter g to the argmax positions.
    Tensor grad = zeros(in_shape);
    Tensor gk = keepdim ? g : unsqueeze(g, d);
    Tensor ik = keepdim ? saved_idx : unsqueeze(saved_idx, d);
    Tensor gc = contiguous(gk), ic = contiguous(ik);
    int64_t outer = 1, inner = 1, n = in_shape[d];
    for (int64_t i = 0; i < d; ++i) outer *= in_shape[i];
    for (int64_t i = d + 1; i < static_cast<int64_t>(in_shape.size()); ++i) inner *= in_shape[i];
    float* gp = grad.data<float>();
    const float* gv = gc.data<float>();
    const int64_t* iv = ic.data<int64_t>();
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t b = 0; b < inner; ++b) gp[(a * n + iv[a * inner + b]) * inner + b] += gv[a * inner + b];
    return std::vector<Tensor>{grad};
  }, autograd::Saves::Nothing);
  return {out, indices};
}

Tensor max(const Tensor& t) {
  detail::check_float(t, "max", "t");
  TESSERA_CHECK(t.numel() > 0, "[max] max of an empty tensor");
  return max(reshape(t, {-1}), 0, false).values;
}

Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return max(t, dim, keepdim).indices;
}

}  // namespace tessera
