#include "tessera/backend/cuda/cuda_kernels.h"

#include "tessera/backend/cuda/elementwise.h"
#include "tessera/backend/cuda/gemm.h"
#include "tessera/ops/detail.h"

#include <algorithm>
#include <optional>
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


// ---- matmul's operands ----

// The element offset of batch item i in a tensor whose leading dims are `batch`.
int64_t item_offset(const Tensor& t, const Shape& batch, int64_t i) {
  int64_t offset = 0;
  for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
    offset += (i % batch[static_cast<size_t>(d)]) * t.strides()[static_cast<size_t>(d)];
    i /= batch[static_cast<size_t>(d)];
  }
  return offset;
}

// `t`'s last two dims as a cuBLASLt operand, or nothing where its strides do not fit one (neither
// dim unit-strided, a leading dimension below the matrix's, or batch items at uneven steps).
std::optional<GemmOperand> as_operand(const Tensor& t, const Shape& batch) {
  const size_t nd = t.shape().size();
  const int64_t rows = t.shape()[nd - 2], cols = t.shape()[nd - 1];
  const int64_t rs = t.strides()[nd - 2], cs = t.strides()[nd - 1];
  GemmOperand op;
  op.rows = rows;
  op.cols = cols;
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= std::max<int64_t>(cols, 1))) {
    op.ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
  } else if ((rows == 1 || rs == 1) && (cols == 1 || cs >= std::max<int64_t>(rows, 1))) {
    op.column_major = true;
    op.ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
  } else {
    return std::nullopt;
  }
  const int64_t count = shape_numel(batch);
  op.batch_step = count > 1 ? item_offset(t, batch, 1) : 0;
  for (int64_t i = 2; i < count; ++i)
    if (item_offset(t, batch, i) != i * op.batch_step) return std::nullopt;
  if (op.batch_step < 0) return std::nullopt;
  op.data = static_cast<const char*>(t.data_ptr());  // the element offset is in data_ptr() already
  return op;
}

GemmPrecision gemm_precision(DType precision) {
  switch (precision) {
    case DType::BFloat16: return GemmPrecision::kBFloat16;
    case DType::Float16: return GemmPrecision::kFloat16;
    default: return GemmPrecision::kFloat32;
  }
}

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

  // On cuBLASLt (gemm.h): transposed views and batch items at one step go in as they are; other
  // layouts, and operands rounded to bf16 / fp16 under autocast, are copied once into a contiguous
  // tensor first. The bias rides cuBLASLt's epilogue rather than a pass of its own.
  Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias, DType precision) const override {
    const size_t nd = a.shape().size();
    const Shape batch(a.shape().begin(), a.shape().end() - 2);
    const int64_t n = a.shape()[nd - 2], k = a.shape()[nd - 1], m = b.shape()[nd - 1];
    Shape out_shape = batch;
    out_shape.push_back(n);
    out_shape.push_back(m);
    Tensor out = Tensor::empty(out_shape, DType::Float32, a.device());
    if (out.numel() == 0) return out;
    if (k == 0) {  // an empty sum: the bias, or zero
      fill(out, 0.0f);
      if (bias.defined()) add_scaled(out, bias, 1.0f);
      return out;
    }
    const GemmPrecision gp = gemm_precision(precision);
    const DType input_dtype = gp == GemmPrecision::kFloat32 ? DType::Float32 : precision;
    // Each operand as cuBLASLt can read it: itself, or one copy (rounded where the precision asks).
    auto ready = [&](const Tensor& t, Tensor& keep) -> GemmOperand {
      if (input_dtype == DType::Float32)
        if (auto op = as_operand(t, batch)) return *op;
      keep = Tensor::empty(t.shape(), input_dtype, t.device());
      copy(keep, t);
      return *as_operand(keep, batch);
    };
    Tensor a_copy, b_copy;
    const GemmOperand a_op = ready(a, a_copy), b_op = ready(b, b_copy);
    const Tensor bias_values = bias.defined() ? detail::as_contiguous(bias) : Tensor();
    gemm_batched(a.device().index, gp, a_op, b_op, floats(out), shape_numel(batch),
                 bias_values.defined() ? floats(bias_values) : nullptr);
    return out;
  }
};

}  // namespace

const Kernels& cuda_kernels() {
  static const CudaKernels table;
  return table;
}

}  // namespace tessera::cuda
