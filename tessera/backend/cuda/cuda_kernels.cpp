#include "tessera/backend/cuda/cuda_kernels.h"

#include "tessera/backend/cuda/elementwise.h"
#include "tessera/ops/detail.h"

#include <vector>

namespace tessera::cuda {
namespace {

IterationShape iteration_shape(const Shape& shape, const char* op) {
  TESSERA_CHECK(static_cast<int>(shape.size()) <= kMaxDims, "[", op, "] a ", shape.size(), "-dim tensor ",
                shape_str(shape), ": the CUDA kernels take at most ", kMaxDims, " dims");
  IterationShape s;
  s.ndim = static_cast<int>(shape.size());
  s.numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    s.sizes[d] = shape[d];
    s.numel *= shape[d];
  }
  return s;
}

// `t`'s element strides seen over `shape` (0 where it is broadcast).
Strides strides_over(const Tensor& t, const Shape& shape) {
  const Shape st = detail::broadcast_strides(t, shape);
  Strides s;
  for (size_t d = 0; d < st.size(); ++d) s.of[d] = st[d];
  return s;
}

ElementType element_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ElementType::kFloat32;
    case DType::Int64: return ElementType::kInt64;
    case DType::BFloat16: return ElementType::kBFloat16;
    case DType::Float16: return ElementType::kFloat16;
  }
  return ElementType::kFloat32;
}

const float* floats(const Tensor& t) { return static_cast<const float*>(t.data_ptr()); }
float* floats(Tensor& t) { return static_cast<float*>(t.data_ptr()); }
float* floats_or_null(Tensor& t) { return t.defined() ? floats(t) : nullptr; }

class CudaKernels final : public Kernels {
 public:
  CudaKernels() : Kernels(DeviceType::CUDA) {}

  Tensor unary(UnaryOp op, const Tensor& a, float scalar) const override {
    Tensor out = Tensor::empty(a.shape(), DType::Float32, a.device());
    cuda::unary(a.device().index, op, scalar, floats(a), strides_over(a, a.shape()), floats(out),
                iteration_shape(a.shape(), op_name(op)));
    return out;
  }

  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, float scalar) const override {
    const Shape shape = broadcast_shapes(a.shape(), b.shape(), op_name(op));
    Tensor out = Tensor::empty(shape, DType::Float32, a.device());
    cuda::binary(a.device().index, op, scalar, floats(a), strides_over(a, shape), floats(b), strides_over(b, shape),
                 floats(out), iteration_shape(shape, op_name(op)));
    return out;
  }

  void copy(Tensor& dst, const Tensor& src) const override {
    cuda::copy(dst.device().index, dst.data_ptr(), element_type(dst.dtype()), strides_over(dst, dst.shape()),
               src.data_ptr(), element_type(src.dtype()), strides_over(src, dst.shape()),
               iteration_shape(dst.shape(), "copy_"));
  }

  void fill(Tensor& t, float value) const override {
    if (t.dtype() == DType::Float32) {
      cuda::fill(t.device().index, floats(t), strides_over(t, t.shape()), iteration_shape(t.shape(), "fill_"), value);
      return;
    }
    // Other dtypes: one float32 value on the device, converted into every element.
    Tensor v = Tensor::empty({}, DType::Float32, t.device());
    cuda::fill(t.device().index, floats(v), Strides{}, iteration_shape({}, "fill_"), value);
    copy(t, v);
  }

  void add_scaled(Tensor& dst, const Tensor& src, float alpha) const override {
    cuda::add_scaled(dst.device().index, floats(dst), strides_over(dst, dst.shape()), floats(src),
                     strides_over(src, dst.shape()), iteration_shape(dst.shape(), "add_"), alpha);
  }

  void scale(Tensor& dst, float value) const override {
    cuda::scale(dst.device().index, floats(dst), strides_over(dst, dst.shape()), iteration_shape(dst.shape(), "mul_"),
                value);
  }

  // Reduced dims moved last (one strided copy where they are not), then a sum per row.
  Tensor sum(const Tensor& t, const Shape& dims, bool keepdim) const override {
    Shape order;
    std::vector<bool> reduced(static_cast<size_t>(t.dim()), false);
    for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
    int64_t cols = 1;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (!reduced[static_cast<size_t>(d)]) order.push_back(d);
    for (int64_t d : dims) {
      order.push_back(d);
      cols *= t.shape()[static_cast<size_t>(d)];
    }
    Tensor rows;
    {
      NoGradGuard no_grad;
      rows = contiguous(permute(t, order));
    }
    Tensor out = Tensor::empty(detail::reduced_shape(t.shape(), dims, keepdim), DType::Float32, t.device());
    const int64_t row_count = cols == 0 ? out.numel() : t.numel() / cols;
    if (cols == 0) {
      fill(out, 0.0f);
      return out;
    }
    cuda::sum_rows(t.device().index, floats(rows), row_count, cols, floats(out));
    return out;
  }

  double squared_norm(const Tensor& t) const override {
    Tensor c = detail::as_contiguous(t);
    return cuda::squared_norm(t.device().index, floats(c), c.numel());
  }

  Tensor softmax(const Tensor& x, bool log_space) const override {
    const int64_t cols = x.dim() == 0 ? 1 : x.shape().back(), rows = cols == 0 ? 0 : x.numel() / cols;
    Tensor out = Tensor::empty(x.shape(), DType::Float32, x.device());
    cuda::softmax_rows(x.device().index, floats(x), rows, cols, log_space, floats(out));
    return out;
  }

  Tensor softmax_backward(const Tensor& out, const Tensor& g_in, bool log_space) const override {
    const Tensor g = detail::as_contiguous(g_in);
    const int64_t cols = out.dim() == 0 ? 1 : out.shape().back(), rows = cols == 0 ? 0 : out.numel() / cols;
    Tensor grad = Tensor::empty(out.shape(), DType::Float32, out.device());
    cuda::softmax_rows_backward(out.device().index, floats(out), floats(g), rows, cols, log_space, floats(grad));
    return grad;
  }

  void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) const override {
    cuda::sgd_update(param.device().index, floats(param), floats(grad), floats_or_null(momentum_buffer), param.numel(), s);
  }

  void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                   const AdamStep& s) const override {
    cuda::adam_update(param.device().index, floats(param), floats(grad), floats(exp_avg), floats(exp_avg_sq),
                      param.numel(), s);
  }

  void lars_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, float local_lr, float weight_decay,
                   float momentum) const override {
    cuda::lars_update(param.device().index, floats(param), floats(grad), floats_or_null(momentum_buffer),
                      param.numel(), local_lr, weight_decay, momentum);
  }
};

}  // namespace

const Kernels& cuda_kernels() {
  static const CudaKernels table;
  return table;
}

}  // namespace tessera::cuda
