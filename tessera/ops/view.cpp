// Views: new shape/strides/offset over the same storage. Each backward maps the gradient back to the
// input's shape.
#include <numeric>

#include "tessera/ops/detail.h"

namespace tessera {

using autograd::record;

namespace {

Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape out = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TESSERA_CHECK(infer_at < 0, "[", op, "] only one dimension can be -1 in ", shape_str(requested));
      infer_at = static_cast<int64_t>(i);
    } else {
      TESSERA_CHECK(out[i] >= 0, "[", op, "] invalid dimension ", out[i], " in ", shape_str(requested));
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    TESSERA_CHECK(known != 0 && numel % known == 0, "[", op, "] cannot reshape ", shape_str(from), " (", numel,
                  " elements) into ", shape_str(requested));
    out[infer_at] = numel / known;
  }
  TESSERA_CHECK(shape_numel(out) == numel, "[", op, "] cannot reshape ", shape_str(from), " (", numel,
                " elements) into ", shape_str(requested), " (", shape_numel(out), " elements)");
  return out;
}

Tensor record_reshape_back(Tensor out, const Tensor& t, const char* name) {
  Shape in_shape = t.shape();
  return record(out, name, {t}, [in_shape](const Tensor& g) { return std::vector<Tensor>{reshape(g, in_shape)}; }, autograd::Saves::Nothing);
}

}  // namespace

Tensor view(const Tensor& t, const Shape& shape) {
  detail::check_defined(t, "view", "t");
  Shape s = infer_shape(shape, t.numel(), "view", t.shape());
  TESSERA_CHECK(t.is_contiguous(), "[view] tensor of shape ", shape_str(t.shape()), " with strides ",
                shape_str(t.strides()), " is not contiguous; use reshape() (which copies) or contiguous()");
  return record_reshape_back(make_view(t, s, contiguous_strides(s), t.offset()), t, "ViewBackward");
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  detail::check_defined(t, "reshape", "t");
  Shape s = infer_shape(shape, t.numel(), "reshape", t.shape());
  if (t.is_contiguous())
    return record_reshape_back(make_view(t, s, contiguous_strides(s), t.offset()), t, "ReshapeBackward");
  return view(contiguous(t), s);
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  detail::check_defined(t, "transpose", "t");
  int64_t a = normalize_dim(dim0, t.dim(), "transpose"), b = normalize_dim(dim1, t.dim(), "transpose");
  if (t.dim() == 0) return t;
  Shape s = t.shape(), st = t.strides();
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return record(make_view(t, s, st, t.offset()), "TransposeBackward", {t},
                [a, b](const Tensor& g) { return std::vector<Tensor>{transpose(g, a, b)}; }, autograd::Saves::Nothing);
}

Tensor permute(const Tensor& t, const Shape& dims) {
  detail::check_defined(t, "permute", "t");
  TESSERA_CHECK(static_cast<int64_t>(dims.size()) == t.dim(), "[permute] got ", dims.size(), " dims ",
                shape_str(dims), " for a tensor of shape ", shape_str(t.shape()));
  Shape norm(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  Shape s(dims.size()), st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    norm[i] = normalize_dim(dims[i], t.dim(), "permute");
    TESSERA_CHECK(!used[norm[i]], "[permute] repeated dim in ", shape_str(dims));
    used[norm[i]] = true;
    inverse[norm[i]] = static_cast<int64_t>(i);
    s[i] = t.shape()[norm[i]];
    st[i] = t.strides()[norm[i]];
  }
  return record(make_view(t, s, st, t.offset()), "PermuteBackward", {t},
                [inverse](const Tensor& g) { return std::vector<Tensor>{permute(g, inverse)}; }, autograd::Saves::Nothing);
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  detail::check_defined(t, "slice", "t");
  TESSERA_CHECK(t.dim() > 0, "[slice] cannot slice a 0-dim tensor");
  int64_t d = normalize_dim(dim, t.dim(), "slice");
  TESSERA_CHECK(step >= 1, "[slice] step must be positive, got ", step);
  int64_t n = t.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = t.shape(), st = t.strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Shape in_shape = t.shape();
  return record(make_view(t, s, st, t.offset() + start * t.strides()[d]), "SliceBackward", {t},
                [in_shape, d, start, end, step](const Tensor& g) {
                  Tensor full_grad = zeros(in_shape);
                  Tensor window = slice(full_grad, d, start, end, step);
                  copy_(window, g);
                  return std::vector<Tensor>{full_grad};
                }, autograd::Saves::Nothing);
}

Tensor expand(const Tensor& t, const Shape& shape) {
  detail::check_defined(t, "expand", "t");
  TESSERA_CHECK(shape.size() >= t.shape().size(), "[expand] cannot expand ", shape_str(t.shape()), " to ",
                shape_str(shape), " (fewer dims)");
  Shape target = shape;
  size_t lead = shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i) {
    if (target[lead + i] == -1) target[lead + i] = t.shape()[i];
    TESSERA_CHECK(t.shape()[i] == target[lead + i] || t.shape()[i] == 1, "[expand] cannot expand ",
                  shape_str(t.shape()), " to ", shape_str(shape), " (dim ", lead + i, ")");
  }
  Shape st = detail::broadcast_strides(t, target);
  Shape in_shape = t.shape();
  return record(make_view(t, target, st, t.offset()), "ExpandBackward", {t},
                [in_shape](const Tensor& g) { return std::vector<Tensor>{sum_to(g, in_shape)}; }, autograd::Saves::Nothing);
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  detail::check_defined(t, "unsqueeze", "t");
  int64_t d = normalize_dim(dim, t.dim() + 1, "unsqueeze");
  Shape s = t.shape(), st = t.strides();
  int64_t stride = d < t.dim() ? st[d] * s[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return record_reshape_back(make_view(t, s, st, t.offset()), t, "UnsqueezeBackward");
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  detail::check_defined(t, "squeeze", "t");
  int64_t d = normalize_dim(dim, t.dim(), "squeeze");
  if (t.dim() == 0 || t.shape()[d] != 1) return t;
  Shape s = t.shape(), st = t.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return record_reshape_back(make_view(t, s, st, t.offset()), t, "SqueezeBackward");
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  detail::check_defined(t, "flatten", "t");
  if (t.dim() == 0) return reshape(t, {1});
  int64_t a = normalize_dim(start_dim, t.dim(), "flatten"), b = normalize_dim(end_dim, t.dim(), "flatten");
  TESSERA_CHECK(a <= b, "[flatten] start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape s(t.shape().begin(), t.shape().begin() + a);
  int64_t m = 1;
  for (int64_t i = a; i <= b; ++i) m *= t.shape()[i];
  s.push_back(m);
  s.insert(s.end(), t.shape().begin() + b + 1, t.shape().end());
  return reshape(t, s);
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  TESSERA_CHECK(t.shape().size() >= shape.size(), "[sum_to] cannot reduce ", shape_str(t.shape()), " to ",
                shape_str(shape));
  size_t lead = t.shape().size() - shape.size();
  Shape dims;
  for (size_t i = 0; i < t.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && t.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  Tensor r = dims.empty() ? t : sum(t, dims, true);
  return reshape(r, shape);
}

}  // namespace tessera
