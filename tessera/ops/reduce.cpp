// Reductions: validation and autograd; the kernels are the table's (kernels.h, cpu_reduce.cpp).
#include "tessera/ops/detail.h"
#include "tessera/ops/kernels.h"

namespace tessera {

using autograd::record;

namespace {

// Gradient of a sum: g broadcast back over the reduced dims.
Tensor expand_reduced_grad(const Tensor& g, const Shape& in_shape, const Shape& dims, bool keepdim) {
  Shape kept_shape = detail::reduced_shape(in_shape, dims, true);
  return expand(reshape(g, kept_shape), in_shape);  // a stride-0 view: consumers read it in place
}

}  // namespace

Tensor sum(const Tensor& t, const Shape& dims_in, bool keepdim) {
  detail::check_float(t, "sum", "t");
  Shape dims = detail::normalize_dims(dims_in, t.dim(), "sum");
  Tensor out = kernels_for(t).sum(t, dims, keepdim);
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
  auto [values, indices] = kernels_for(t).max(t, d, keepdim);
  Shape in_shape = t.shape();
  Tensor saved_idx = indices;
  Tensor out = record(values, "MaxBackward", {t}, [in_shape, d, keepdim, saved_idx](const Tensor& g) {
    Tensor grad = kernels_for(g).max_backward(g, saved_idx, in_shape, d, keepdim);
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
