// Joining and indexing: cat, stack, split (views and copies), index_select (the table's kernel).
#include "tessera/ops/detail.h"
#include "tessera/ops/kernels.h"

namespace tessera {

using autograd::record;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TESSERA_CHECK(!tensors.empty(), "[cat] needs at least one tensor");
  const Tensor& first = tensors[0];
  detail::check_defined(first, "cat", "tensors[0]");
  TESSERA_CHECK(first.dim() > 0, "[cat] cannot concatenate 0-dim tensors; use stack");
  int64_t d = normalize_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_defined(t, "cat", "tensors[i]");
    TESSERA_CHECK(t.dtype() == first.dtype(), "[cat] tensor ", i, " is ", dtype_name(t.dtype()), " but tensor 0 is ",
                  dtype_name(first.dtype()));
    bool ok = t.dim() == first.dim();
    for (int64_t j = 0; ok && j < t.dim(); ++j) ok = j == d || t.shape()[j] == first.shape()[j];
    TESSERA_CHECK(ok, "[cat] tensor ", i, " has shape ", shape_str(t.shape()), " but tensor 0 has ",
                  shape_str(first.shape()), "; all dims but ", d, " must match");
    out_shape[d] += t.shape()[d];
  }
  Tensor out = Tensor::empty(out_shape, first.dtype());
  std::vector<int64_t> sizes;
  {
    NoGradGuard no_grad;
    int64_t at = 0;
    for (const Tensor& t : tensors) {
      Tensor window = slice(out, d, at, at + t.shape()[d]);
      copy_(window, t);
      at += t.shape()[d];
      sizes.push_back(t.shape()[d]);
    }
  }
  return record(out, "CatBackward", tensors, [d, sizes](const Tensor& g) {
    std::vector<Tensor> grads;
    int64_t at = 0;
    for (int64_t s : sizes) {
      grads.push_back(slice(g, d, at, at + s));
      at += s;
    }
    return grads;
  }, autograd::Saves::Nothing);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TESSERA_CHECK(!tensors.empty(), "[stack] needs at least one tensor");
  int64_t d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TESSERA_CHECK(tensors[i].shape() == tensors[0].shape(), "[stack] tensor ", i, " has shape ",
                  shape_str(tensors[i].shape()), " but tensor 0 has ", shape_str(tensors[0].shape()));
    expanded.push_back(unsqueeze(tensors[i], d));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  detail::check_defined(t, "split", "t");
  TESSERA_CHECK(split_size > 0, "[split] split_size must be positive, got ", split_size);
  int64_t d = normalize_dim(dim, t.dim(), "split");
  std::vector<Tensor> parts;
  for (int64_t at = 0; at < t.shape()[d]; at += split_size) parts.push_back(slice(t, d, at, at + split_size));
  if (parts.empty()) parts.push_back(t);
  return parts;
}

Tensor index_select(const Tensor& t_in, int64_t dim, const Tensor& indices_in) {
  detail::check_float(t_in, "index_select", "input");
  detail::check_defined(indices_in, "index_select", "indices");
  TESSERA_CHECK(indices_in.dtype() == DType::Int64 && indices_in.dim() == 1,
                "[index_select] indices must be a 1-D int64 tensor, got ", dtype_name(indices_in.dtype()), " ",
                shape_str(indices_in.shape()));
  int64_t d = normalize_dim(dim, t_in.dim(), "index_select");
  detail::check_same_device(t_in, indices_in, "index_select");
  Tensor t = detail::as_contiguous(t_in), indices = detail::as_contiguous(indices_in);
  Tensor out = kernels_for(t).index_select(t, d, indices);
  Shape in_shape = t.shape();
  return record(out, "IndexSelectBackward", {t_in}, [in_shape, d, indices](const Tensor& g) {
    return std::vector<Tensor>{kernels_for(g).index_select_backward(g, in_shape, d, indices)};
  }, autograd::Saves::Nothing);
}

}  // namespace tessera
