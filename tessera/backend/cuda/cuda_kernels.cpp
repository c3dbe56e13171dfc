// The CUDA kernel table (cuda_kernels.h): each entry checks what only the table can (optional operands
// on the input's device), allocates its outputs and any device scratch on the input's device, and
// calls the plain kernels of elementwise.h and nn_kernels.h with pointers, sizes and strides.
#include "tessera/backend/cuda/cuda_kernels.h"

#include "tessera/autograd/autocast.h"

#include "tessera/backend/cuda/conv.h"
#include "tessera/backend/cuda/elementwise.h"
#include "tessera/backend/cuda/gemm.h"
#include "tessera/backend/cuda/nn_kernels.h"
#include "tessera/ops/detail.h"

#include <algorithm>
#include <cstdint>
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
  // Checked here as well as in iteration_shape: the two are sibling arguments, evaluated in either order.
  TESSERA_CHECK(static_cast<int>(shape.size()) <= kMaxDims, "[cuda] a ", shape.size(), "-dim tensor ",
                shape_str(shape), ": the CUDA kernels take at most ", kMaxDims, " dims");
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
const float* floats_or_null(const Tensor& t) { return t.defined() ? floats(t) : nullptr; }
const int64_t* longs(const Tensor& t) { return static_cast<const int64_t*>(t.data_ptr()); }
int64_t* longs(Tensor& t) { return static_cast<int64_t*>(t.data_ptr()); }

// Device scratch lent to a kernel (partial sums, flags read back, a sort's arrays): `bytes` from the
// caching allocator, as an int64 tensor (its blocks are cudaMalloc's, 256-byte aligned).
Tensor scratch_for(size_t bytes, const Device& device) {
  return Tensor::empty({static_cast<int64_t>((bytes + 7) / 8)}, DType::Int64, device);
}

// The ops check that their inputs share a device, but not every optional operand (a norm's weight,
// running statistics): a host pointer must never reach a kernel.
void check_on(const Device& device, const Tensor& t, const char* op, const char* arg) {
  if (t.defined())
    TESSERA_CHECK(t.device() == device, "[", op, "] ", arg, " is on ", t.device().str(), " but the input on ",
                  device.str(), "; move it with .to(", device.str(), ")");
}

// `shape` seen as (outer, n, inner) around dim d.
struct AroundDim {
  int64_t outer = 1, n = 1, inner = 1;
  AroundDim(const Shape& shape, int64_t d) : n(shape[static_cast<size_t>(d)]) {
    for (int64_t i = 0; i < d; ++i) outer *= shape[static_cast<size_t>(i)];
    for (size_t i = static_cast<size_t>(d) + 1; i < shape.size(); ++i) inner *= shape[i];
  }
};

// The rows of a row kernel's input: its last dim, and how many of those.
int64_t last_dim(const Tensor& t) { return t.dim() == 0 ? 1 : t.shape().back(); }
int64_t rows_of(const Tensor& t) { return last_dim(t) == 0 ? 0 : t.numel() / last_dim(t); }


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

// ---- convolution's and pooling's geometry ----

int64_t conv_out_size(int64_t in, int64_t pad, int64_t dilation, int64_t kernel, int64_t stride) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

ConvGeometry conv_geometry(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  ConvGeometry g;
  g.N = x.shape()[0], g.C = x.shape()[1], g.H = x.shape()[2], g.W = x.shape()[3];
  g.OC = w.shape()[0], g.KH = w.shape()[2], g.KW = w.shape()[3];
  g.OH = conv_out_size(g.H, o.pad_h, o.dilation_h, g.KH, o.stride_h);
  g.OW = conv_out_size(g.W, o.pad_w, o.dilation_w, g.KW, o.stride_w);
  g.stride_h = o.stride_h, g.stride_w = o.stride_w, g.pad_h = o.pad_h, g.pad_w = o.pad_w;
  g.dilation_h = o.dilation_h, g.dilation_w = o.dilation_w, g.groups = o.groups;
  return g;
}

PoolGeometry pool_geometry(const Shape& in, const Pool2dOptions& o) {
  PoolGeometry g;
  g.N = in[0], g.C = in[1], g.H = in[2], g.W = in[3];
  g.OH = conv_out_size(g.H, o.pad_h, 1, o.kernel_h, o.stride_h);
  g.OW = conv_out_size(g.W, o.pad_w, 1, o.kernel_w, o.stride_w);
  g.kernel_h = o.kernel_h, g.kernel_w = o.kernel_w, g.stride_h = o.stride_h, g.stride_w = o.stride_w;
  g.pad_h = o.pad_h, g.pad_w = o.pad_w;
  return g;
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
    // The blocks' partial sums in memory from the tensor allocator (a cudaMalloc per call would wait
    // for the device, and bypass the allocator's release-and-retry when memory is short).
    Tensor scratch = scratch_for(kSquaredNormBlocks * sizeof(double), t.device());
    return cuda::squared_norm(t.device().index, floats(c), c.numel(), static_cast<double*>(scratch.data_ptr()));
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

  MaxResult max(const Tensor& t_in, int64_t d, bool keepdim) const override {
    const Tensor t = detail::as_contiguous(t_in);
    const AroundDim at(t.shape(), d);
    const Shape out_shape = detail::reduced_shape(t.shape(), Shape{d}, keepdim);
    Tensor values = Tensor::empty(out_shape, DType::Float32, t.device());
    Tensor indices = Tensor::empty(out_shape, DType::Int64, t.device());
    cuda::max_over_dim(t.device().index, floats(t), at.outer, at.n, at.inner, floats(values), longs(indices));
    return {values, indices};
  }

  // g and the indices are (outer, inner) whether or not the dim was kept.
  Tensor max_backward(const Tensor& g_in, const Tensor& indices_in, const Shape& in_shape, int64_t d,
                      bool keepdim) const override {
    const Tensor g = detail::as_contiguous(g_in), indices = detail::as_contiguous(indices_in);
    const AroundDim at(in_shape, d);
    Tensor grad = Tensor::empty(in_shape, DType::Float32, g.device());
    cuda::max_over_dim_backward(g.device().index, floats(g), longs(indices), at.outer, at.n, at.inner, floats(grad));
    return grad;
  }

  Tensor attention_weights(const Tensor& scores, float scale, bool causal) const override {
    const int64_t Tq = scores.shape()[static_cast<size_t>(scores.dim() - 2)], Tk = last_dim(scores);
    Tensor out = Tensor::empty(scores.shape(), DType::Float32, scores.device());
    cuda::attention_rows(scores.device().index, floats(scores), rows_of(scores), Tq, Tk, scale, causal, floats(out));
    return out;
  }

  Tensor attention_weights_backward(const Tensor& out, const Tensor& g_in, float scale, bool causal) const override {
    const Tensor g = detail::as_contiguous(g_in);
    const int64_t Tq = out.shape()[static_cast<size_t>(out.dim() - 2)], Tk = last_dim(out);
    Tensor grad = Tensor::empty(out.shape(), DType::Float32, out.device());
    cuda::attention_rows_backward(out.device().index, floats(out), floats(g), rows_of(out), Tq, Tk, scale, causal,
                                  floats(grad));
    return grad;
  }

  // The loss stays on the device; the count and any bad target come back (one wait).
  CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets,
                                   const CrossEntropyOptions& opt) const override {
    const int64_t N = logits.shape()[0], C = logits.shape()[1];
    const Device device = logits.device();
    Tensor loss = Tensor::empty({}, DType::Float32, device), lse = Tensor::empty({N}, DType::Float32, device);
    Tensor scratch = scratch_for(cuda::cross_entropy_scratch_bytes(N), device);
    const cuda::CrossEntropySummary s =
        cuda::cross_entropy_rows(device.index, floats(logits), longs(targets), N, C, opt.ignore_index,
                                 opt.label_smoothing, floats(loss), floats(lse), scratch.data_ptr());
    TESSERA_CHECK_INDEX(s.bad_position < 0, "[cross_entropy] target ", s.bad_target, " at position ", s.bad_position,
                        " is out of range for ", C, " classes");
    return {loss, lse, s.count};
  }

  Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& g_in,
                                const CrossEntropyOptions& opt, int64_t count) const override {
    const Tensor g = detail::as_contiguous(g_in);
    const int64_t N = logits.shape()[0], C = logits.shape()[1];
    Tensor grad = Tensor::empty({N, C}, DType::Float32, logits.device());
    cuda::cross_entropy_rows_backward(logits.device().index, floats(logits), longs(targets), floats(lse), floats(g), N,
                                      C, opt.ignore_index, opt.label_smoothing, count, floats(grad));
    return grad;
  }

  WithSaved layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, int64_t D, float eps) const override {
    check_on(x.device(), w, "layer_norm", "weight");
    check_on(x.device(), b, "layer_norm", "bias");
    const int64_t M = D == 0 ? 0 : x.numel() / D;
    Tensor out = Tensor::empty(x.shape(), DType::Float32, x.device());
    Tensor stats = Tensor::empty({M, 2}, DType::Float32, x.device());
    cuda::layer_norm_rows(x.device().index, floats(x), floats_or_null(w), floats_or_null(b), M, D, eps, floats(out),
                          floats(stats));
    return {out, stats};
  }

  LayerGrads layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& stats, const Tensor& g_in, int64_t D,
                                bool gw, bool gb) const override {
    const Tensor g = detail::as_contiguous(g_in);
    const int64_t M = D == 0 ? 0 : x.numel() / D;
    const Device device = x.device();
    Tensor gx = Tensor::empty(x.shape(), DType::Float32, device);
    Tensor gwt = gw ? Tensor::empty({D}, DType::Float32, device) : Tensor();
    Tensor gbt = gb ? Tensor::empty({D}, DType::Float32, device) : Tensor();
    const int64_t partials = gw || gb ? 2 * cuda::layer_norm_row_chunks(M) * D : 0;
    Tensor partial = Tensor::empty({partials}, DType::Float32, device);
    cuda::layer_norm_rows_backward(device.index, floats(x), floats_or_null(w), floats(stats), floats(g), M, D,
                                   floats(gx), floats_or_null(gwt), floats_or_null(gbt), floats(partial));
    return {gx, gwt, gbt};
  }

  // The running statistics may be strided views (a buffer's slice): their first element and stride.
  WithSaved batch_norm(const Tensor& x, Tensor& running_mean, Tensor& running_var, const Tensor& w, const Tensor& b,
                       bool training, float momentum, float eps) const override {
    const Device device = x.device();
    check_on(device, running_mean, "batch_norm", "running_mean");
    check_on(device, running_var, "batch_norm", "running_var");
    check_on(device, w, "batch_norm", "weight");
    check_on(device, b, "batch_norm", "bias");
    const int64_t N = x.shape()[0], C = x.shape()[1], S = N * C == 0 ? 0 : x.numel() / (N * C);
    Tensor out = Tensor::empty(x.shape(), DType::Float32, device);
    Tensor stats = Tensor::empty({C, 2}, DType::Float32, device);
    const int64_t mean_stride = running_mean.defined() ? running_mean.strides()[0] : 0;
    const int64_t var_stride = running_var.defined() ? running_var.strides()[0] : 0;
    cuda::batch_norm_channels(device.index, floats(x), N, C, S, floats_or_null(running_mean), mean_stride,
                              floats_or_null(running_var), var_stride, floats_or_null(w), floats_or_null(b), training,
                              momentum, eps, floats(out), floats(stats));
    return {out, stats};
  }

  LayerGrads batch_norm_backward(const Tensor& x, const Tensor& w, const Tensor& stats, const Tensor& g_in,
                                bool training, bool gw, bool gb) const override {
    const Tensor g = detail::as_contiguous(g_in);
    const Device device = x.device();
    const int64_t N = x.shape()[0], C = x.shape()[1], S = N * C == 0 ? 0 : x.numel() / (N * C);
    Tensor gx = Tensor::empty(x.shape(), DType::Float32, device);
    Tensor gwt = Tensor::empty({C}, DType::Float32, device), gbt = Tensor::empty({C}, DType::Float32, device);
    cuda::batch_norm_channels_backward(device.index, floats(x), floats_or_null(w), floats(stats), floats(g), N, C, S,
                                       training, floats(gx), floats(gwt), floats(gbt));
    return {gx, gw ? gwt : Tensor(), gb ? gbt : Tensor()};
  }

  Tensor embedding(const Tensor& weight, const Tensor& indices) const override {
    const int64_t V = weight.shape()[0], D = weight.shape()[1], n = indices.numel();
    const Device device = weight.device();
    Tensor scratch = scratch_for(cuda::kIndexCheckScratchBytes, device);
    const cuda::IndexCheck bad = cuda::check_indices(device.index, longs(indices), n, V, scratch.data_ptr());
    TESSERA_CHECK_INDEX(bad.position < 0, "[embedding] index ", bad.value, " at position ", bad.position,
                        " is out of range for ", V, " embeddings");
    Shape out_shape = indices.shape();
    out_shape.push_back(D);
    Tensor out = Tensor::empty(out_shape, DType::Float32, device);
    cuda::gather_rows(device.index, floats(weight), longs(indices), 1, V, D, n, floats(out));
    return out;
  }

  Tensor embedding_backward(const Tensor& g_in, const Tensor& indices, int64_t V) const override {
    const Tensor g = detail::as_contiguous(g_in);
    const int64_t D = last_dim(g);
    Tensor grad = Tensor::empty({V, D}, DType::Float32, g.device());
    scatter_add(g, indices, 1, V, D, grad);
    return grad;
  }

  Tensor index_select(const Tensor& t, int64_t d, const Tensor& indices) const override {
    const AroundDim at(t.shape(), d);
    const int64_t k = indices.numel();
    const Device device = t.device();
    Tensor scratch = scratch_for(cuda::kIndexCheckScratchBytes, device);
    const cuda::IndexCheck bad = cuda::check_indices(device.index, longs(indices), k, at.n, scratch.data_ptr());
    TESSERA_CHECK_INDEX(bad.position < 0, "[index_select] index ", bad.value, " is out of range for dim ", d,
                        " of size ", at.n);
    Shape out_shape = t.shape();
    out_shape[static_cast<size_t>(d)] = k;
    Tensor out = Tensor::empty(out_shape, DType::Float32, device);
    cuda::gather_rows(device.index, floats(t), longs(indices), at.outer, at.n, at.inner, k, floats(out));
    return out;
  }

  Tensor index_select_backward(const Tensor& g_in, const Shape& in_shape, int64_t d,
                               const Tensor& indices) const override {
    const Tensor g = detail::as_contiguous(g_in);
    const AroundDim at(in_shape, d);
    Tensor grad = Tensor::empty(in_shape, DType::Float32, g.device());
    scatter_add(g, indices, at.outer, at.n, at.inner, grad);
    return grad;
  }

  // One draw from `gen` seeds the mask's counter-based stream (nn_kernels.h): the generator advances
  // once per call, and a seed gives the same masks on every run, though not the CPU's masks (nor
  // does PyTorch's CUDA mask equal its CPU mask).
  Tensor dropout_mask(const Shape& shape, const Device& device, float p, Generator& gen) const override {
    Tensor mask = Tensor::empty(shape, DType::Float32, device);
    const float keep_scale = p == 1.0f ? 0.0f : 1.0f / (1.0f - p);
    const uint64_t seed = gen.next_u64();
    cuda::dropout_mask(device.index, floats(mask), mask.numel(), p, keep_scale, seed);
    return mask;
  }

  void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) const override {
    cuda::sgd_update(param.device().index, floats(param), floats(grad), floats_or_null(momentum_buffer), param.numel(), s);
  }

  void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                   const AdamStep& s) const override {
    cuda::adam_update(param.device().index, floats(param), floats(grad), floats(exp_avg), floats(exp_avg_sq),
                      param.numel(), s);
  }

  std::pair<double, double> lamb_moments(const Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                                         const LambStep& s) const override {
    Tensor scratch = scratch_for(cuda::kLambScratchBytes, param.device());
    return cuda::lamb_moments(param.device().index, floats(param), floats(grad), floats(exp_avg), floats(exp_avg_sq),
                              param.numel(), s, scratch.data_ptr());
  }

  void lamb_apply(Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const LambStep& s,
                  float step) const override {
    cuda::lamb_apply(param.device().index, floats(param), floats(exp_avg), floats(exp_avg_sq), param.numel(), s, step);
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
    const GemmPrecision gp = precision == DType::Float32 && allow_tf32() ? GemmPrecision::kTensorFloat32
                                                                         : gemm_precision(precision);
    const DType input_dtype = precision == DType::Float32 ? DType::Float32 : precision;
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
    // cuBLASLt's bias epilogue reads the bias in vectors: a view at an odd offset goes in as a copy.
    Tensor bias_values = bias.defined() ? detail::as_contiguous(bias) : Tensor();
    if (bias_values.defined() && reinterpret_cast<uintptr_t>(bias_values.data_ptr()) % 16 != 0) {
      Tensor aligned = Tensor::empty(bias_values.shape(), DType::Float32, bias_values.device());
      copy(aligned, bias_values);
      bias_values = aligned;
    }
    gemm_batched(a.device().index, gp, a_op, b_op, floats(out), shape_numel(batch),
                 bias_values.defined() ? floats(bias_values) : nullptr);
    return out;
  }


  // ---- convolution (cuDNN, conv.h) and pooling ----
  // Float32 operands go to cuDNN as they are; under bf16 / fp16 autocast x and w are rounded once,
  // cuDNN writes its output in that type (its convolutions keep one type), and the output comes back
  // to float32. The bias is one broadcast add.
  Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& opt,
                DType precision) const override {
    const ConvGeometry g = conv_geometry(x, weight, opt);
    Tensor out = Tensor::empty({g.N, g.OC, g.OH, g.OW}, DType::Float32, x.device());
    if (out.numel() == 0) return out;
    if (g.C == 0) {  // an empty sum: the bias, or zero (cuDNN refuses a tensor of no channels)
      fill(out, 0.0f);
      if (bias.defined()) add_scaled(out, reshape(bias, {1, g.OC, 1, 1}), 1.0f);
      return out;
    }
    const int device = x.device().index;
    if (precision == DType::Float32) {
      conv2d_forward(device, ElementType::kFloat32, g, x.data_ptr(), weight.data_ptr(), out.data_ptr(), allow_tf32());
    } else {
      const Tensor xh = rounded(x, precision), wh = rounded(weight, precision);
      Tensor yh = Tensor::empty(out.shape(), precision, x.device());
      conv2d_forward(device, element_type(precision), g, xh.data_ptr(), wh.data_ptr(), yh.data_ptr(), false);
      copy(out, yh);
    }
    if (bias.defined()) add_scaled(out, reshape(bias, {1, g.OC, 1, 1}), 1.0f);
    return out;
  }

  LayerGrads conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& g_in, const Conv2dOptions& opt,
                             DType precision, bool input_grad, bool weight_grad, bool bias_grad) const override {
    const ConvGeometry g = conv_geometry(x, weight, opt);
    const Tensor dy = detail::as_contiguous(g_in);
    const int device = x.device().index;
    LayerGrads grads;
    if (input_grad) grads.x = Tensor::empty(x.shape(), DType::Float32, x.device());
    if (weight_grad) grads.weight = Tensor::empty(weight.shape(), DType::Float32, x.device());
    if (bias_grad) grads.bias = sum(dy, {0, 2, 3}, false);
    if (g.N == 0 || g.OC == 0 || g.OH * g.OW == 0) {  // nothing reached the output: the gradients are zero
      if (input_grad) fill(grads.x, 0.0f);
      if (weight_grad) fill(grads.weight, 0.0f);
      return grads;
    }
    if (precision == DType::Float32) {
      if (input_grad) conv2d_backward_data(device, ElementType::kFloat32, g, dy.data_ptr(), weight.data_ptr(), grads.x.data_ptr(),
                                             allow_tf32());
      if (weight_grad)
        conv2d_backward_filter(device, ElementType::kFloat32, g, x.data_ptr(), dy.data_ptr(), grads.weight.data_ptr(),
                               allow_tf32());
      return grads;
    }
    // Mixed precision: the operands rounded as the forward rounded them, each gradient written in
    // that type by cuDNN and brought back to float32.
    const ElementType type = element_type(precision);
    const Tensor dyh = rounded(dy, precision);
    if (input_grad) {
      const Tensor wh = rounded(weight, precision);
      Tensor dxh = Tensor::empty(x.shape(), precision, x.device());
      conv2d_backward_data(device, type, g, dyh.data_ptr(), wh.data_ptr(), dxh.data_ptr(), false);
      copy(grads.x, dxh);
    }
    if (weight_grad) {
      const Tensor xh = rounded(x, precision);
      Tensor dwh = Tensor::empty(weight.shape(), precision, x.device());
      conv2d_backward_filter(device, type, g, xh.data_ptr(), dyh.data_ptr(), dwh.data_ptr(), false);
      copy(grads.weight, dwh);
    }
    return grads;
  }

  // The saved tensor is each window's argmax (int64, its position in the input plane; -1: none).
  WithSaved max_pool2d(const Tensor& x, const Pool2dOptions& opt, bool relu_first) const override {
    const PoolGeometry g = pool_geometry(x.shape(), opt);
    Tensor out = Tensor::empty({g.N, g.C, g.OH, g.OW}, DType::Float32, x.device());
    Tensor argmax = Tensor::empty(out.shape(), DType::Int64, x.device());
    cuda::max_pool2d(x.device().index, g, floats(x), relu_first, floats(out), longs(argmax));
    return {out, argmax};
  }

  Tensor max_pool2d_backward(const Tensor& g_in, const Tensor& saved, const Shape& in_shape, const Pool2dOptions& opt,
                             bool relu_first) const override {
    const PoolGeometry g = pool_geometry(in_shape, opt);
    const Tensor dy = detail::as_contiguous(g_in);
    Tensor dx = Tensor::empty(in_shape, DType::Float32, g_in.device());
    cuda::max_pool2d_backward(g_in.device().index, g, floats(dy), longs(saved), floats(dx));
    return dx;
  }

  Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt) const override {
    const PoolGeometry g = pool_geometry(x.shape(), opt);
    Tensor out = Tensor::empty({g.N, g.C, g.OH, g.OW}, DType::Float32, x.device());
    cuda::avg_pool2d(x.device().index, g, floats(x), floats(out));
    return out;
  }

  Tensor avg_pool2d_backward(const Tensor& g_in, const Shape& in_shape, const Pool2dOptions& opt) const override {
    const PoolGeometry g = pool_geometry(in_shape, opt);
    const Tensor dy = detail::as_contiguous(g_in);
    Tensor dx = Tensor::empty(in_shape, DType::Float32, g_in.device());
    cuda::avg_pool2d_backward(g_in.device().index, g, floats(dy), floats(dx));
    return dx;
  }

 private:
  // t (contiguous) in `dtype`: one converting copy.
  Tensor rounded(const Tensor& t, DType dtype) const {
    Tensor out = Tensor::empty(t.shape(), dtype, t.device());
    copy(out, t);
    return out;
  }

  // grad (outer, n, inner) = 0, then g (outer, k, inner) added at the k indices (deterministic:
  // nn_kernels.h's scatter_add_rows).
  static void scatter_add(const Tensor& g, const Tensor& indices, int64_t outer, int64_t n, int64_t inner,
                          Tensor& grad) {
    const int device = g.device().index;
    const int64_t k = indices.numel();
    Tensor scratch = scratch_for(cuda::scatter_add_scratch_bytes(device, k, n), g.device());
    cuda::scatter_add_rows(device, floats(g), longs(indices), outer, n, inner, k, floats(grad), scratch.data_ptr());
  }
};

}  // namespace

const Kernels& cuda_kernels() {
  static const CudaKernels table;
  return table;
}

}  // namespace tessera::cuda
