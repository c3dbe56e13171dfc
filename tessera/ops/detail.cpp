#include "tessera/ops/detail.h"

#include <algorithm>

namespace tessera::detail {

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  const Shape& s = t.shape();
  const Shape& st = t.strides();
  TESSERA_ASSERT(s.size() <= shape.size(), "broadcast_strides rank");
  Shape out(shape.size(), 0);
  size_t lead = shape.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    TESSERA_ASSERT(s[i] == shape[lead + i] || s[i] == 1, "broadcast_strides dim");
    out[lead + i] = (s[i] == 1 && shape[lead + i] != 1) ? 0 : st[i];
  }
  return out;
}

void check_defined(const Tensor& t, const char* op, const char* arg) {
  TESSERA_CHECK(t.defined(), "[", op, "] argument '", arg, "' is an undefined tensor");
}

void check_float(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  TESSERA_CHECK(t.dtype() == DType::Float32, "[", op, "] argument '", arg, "' must be float32, got ",
                dtype_name(t.dtype()), " with shape ", shape_str(t.shape()));
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  TESSERA_CHECK(a.device() == b.device(), "[", op, "] tensors are on different devices: ", a.device().str(),
                " and ", b.device().str());
}

Tensor as_contiguous(const Tensor& t) { return t.is_contiguous() ? t : contiguous(t); }

Shape normalize_dims(const Shape& dims, int64_t ndim, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) out.push_back(normalize_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  TESSERA_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "[", op, "] repeated dim in ",
                shape_str(dims));
  return out;
}

Shape reduced_shape(const Shape& shape, const Shape& dims, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced) out.push_back(shape[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

}  // namespace tessera::detail
