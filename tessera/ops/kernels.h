// The kernel table: what one device computes for the ops of ops.h. An op in ops/*.cpp validates its
// arguments and records autograd, then calls the kernel of its inputs' device through kernels_for()
// (MLX's and flashlight's split of op and kernel). The CPU's table is backend/cpu/cpu_kernels.h; a
// device plugs in by overriding what it has. A kernel a device lacks throws NotSupportedError naming
// the op and the device (the base class's entries do), never a silent copy to the CPU.
//
// Kernels see validated arguments: shapes checked, dims normalised, float32 where the op says so.
// Their outputs are contiguous and on the device of their inputs. Elementwise kernels take an op
// code, not a function, so that one templated loop (or one CUDA kernel) serves every formula.
#pragma once
#include <utility>

#include "tessera/core/tensor.h"
#include "tessera/ops/op_codes.h"
#include "tessera/ops/ops.h"

namespace tessera {

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);

// A kernel's output with what its backward reads (statistics per row, per channel or per sample).
struct WithSaved {
  Tensor out;
  Tensor saved;
};

struct CrossEntropyResult {
  Tensor loss, lse;
  int64_t count = 0;
};

// The gradients of a layer's input, weight and bias (a normalisation's, a convolution's): undefined
// where not asked for.
struct LayerGrads {
  Tensor x, weight, bias;
};

class Kernels {
 public:
  explicit Kernels(DeviceType device) : device_(device) {}
  virtual ~Kernels() = default;
  DeviceType device() const { return device_; }

  // ---- elementwise: any strides, b broadcast against a; a new contiguous float32 output ----
  virtual Tensor unary(UnaryOp op, const Tensor& a, float scalar) const;
  virtual Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, float scalar) const;

  // ---- in place: dst of any strides, src broadcast to dst's shape ----
  virtual void copy(Tensor& dst, const Tensor& src) const;  // converting between dtypes
  virtual void fill(Tensor& t, float value) const;
  virtual void add_scaled(Tensor& dst, const Tensor& src, float alpha) const;  // dst += alpha src
  virtual void scale(Tensor& dst, float value) const;                         // dst *= value

  // ---- reductions (dims normalised, sorted, distinct) ----
  virtual Tensor sum(const Tensor& t, const Shape& dims, bool keepdim) const;
  virtual MaxResult max(const Tensor& t, int64_t dim, bool keepdim) const;  // NaN wins, first index on ties
  // g scattered to the positions `indices` picked (the gradient of max).
  virtual Tensor max_backward(const Tensor& g, const Tensor& indices, const Shape& in_shape, int64_t dim,
                              bool keepdim) const;
  // Σ x² in double (LARS's and LAMB's norms, gradient clipping).
  virtual double squared_norm(const Tensor& t) const;

  // ---- row kernels over the last dim of a contiguous input ----
  virtual Tensor softmax(const Tensor& x, bool log_space) const;
  virtual Tensor softmax_backward(const Tensor& out, const Tensor& g, bool log_space) const;
  // softmax(scale · scores) where, under `causal`, query i sees keys j <= i + (Tk - Tq) only.
  virtual Tensor attention_weights(const Tensor& scores, float scale, bool causal) const;
  virtual Tensor attention_weights_backward(const Tensor& out, const Tensor& g, float scale, bool causal) const;
  // The mean loss (0-dim) over the targets not ignored, with each row's log-sum-exp (N) and their count.
  virtual CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets,
                                           const CrossEntropyOptions& opt) const;
  virtual Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                        const Tensor& g, const CrossEntropyOptions& opt, int64_t count) const;
  // The output and each row's mean and 1/std (M, 2).
  virtual WithSaved layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t D, float eps) const;
  virtual LayerGrads layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats, const Tensor& g,
                                        int64_t D, bool weight_grad, bool bias_grad) const;
  // The output and each channel's mean and 1/std (C, 2); in training the running statistics are updated.
  virtual WithSaved batch_norm(const Tensor& x, Tensor& running_mean, Tensor& running_var, const Tensor& weight,
                               const Tensor& bias, bool training, float momentum, float eps) const;
  virtual LayerGrads batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats, const Tensor& g,
                                        bool training, bool weight_grad, bool bias_grad) const;

  // ---- matrix products ----
  // (batch..., n, k) @ (batch..., k, m), the batch dims identical (broadcast already), any strides: a
  // new contiguous float32 (batch..., n, m), with bias (m) added to every row where defined.
  // `precision` is autocast's dtype: Float32, or BFloat16 / Float16, the operands rounded to it first.
  virtual Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias, DType precision) const;

  // ---- convolution and pooling: NCHW, contiguous float32 (shapes checked by the op) ----
  // x (N, C, H, W) * weight (OC, C / groups, KH, KW) + bias (OC): float32 (N, OC, OH, OW), the
  // products in `precision` (autocast's dtype) as matmul's.
  virtual Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& opt,
                        DType precision) const;
  virtual LayerGrads conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& g, const Conv2dOptions& opt,
                                     DType precision, bool input_grad, bool weight_grad, bool bias_grad) const;
  // Each window's maximum (of relu(x) where relu_first), and what the backward reads to send each
  // window's gradient to where its maximum came from (the device's choice: its argmax, or the input).
  virtual WithSaved max_pool2d(const Tensor& x, const Pool2dOptions& opt, bool relu_first) const;
  virtual Tensor max_pool2d_backward(const Tensor& g, const Tensor& saved, const Shape& in_shape,
                                     const Pool2dOptions& opt, bool relu_first) const;
  virtual Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt) const;  // count_include_pad
  virtual Tensor avg_pool2d_backward(const Tensor& g, const Shape& in_shape, const Pool2dOptions& opt) const;

  // ---- indexing (index ranges are checked here, where the indices are) ----
  virtual Tensor embedding(const Tensor& weight, const Tensor& indices) const;
  virtual Tensor embedding_backward(const Tensor& g, const Tensor& indices, int64_t num_embeddings) const;
  virtual Tensor index_select(const Tensor& t, int64_t dim, const Tensor& indices) const;
  virtual Tensor index_select_backward(const Tensor& g, const Shape& in_shape, int64_t dim,
                                       const Tensor& indices) const;

  // ---- random ----
  // Dropout's mask on `device`: 1 / (1 - p) where kept, 0 where dropped, drawn from `gen` (the CPU's
  // in element order; a device's may draw a seed from it for a counter-based stream).
  virtual Tensor dropout_mask(const Shape& shape, const Device& device, float p, Generator& gen) const;

  // ---- fused optimizer updates: one pass over a parameter, its gradient and its state ----
  // (contiguous float32 tensors of one shape; the buffer is undefined without momentum)
  virtual void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) const;
  virtual void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                           const AdamStep& s) const;
  // LAMB in two passes (the norms may be summed over ZeRO pieces between them): the moments, with
  // ||w||² and ||u||² of the update u; then w -= step · u, u recomputed bit for bit.
  virtual std::pair<double, double> lamb_moments(const Tensor& param, const Tensor& grad, Tensor& exp_avg,
                                                 Tensor& exp_avg_sq, const LambStep& s) const;
  virtual void lamb_apply(Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const LambStep& s,
                          float step) const;
  // LARS's step with its local lr: v = mu v + local_lr (g + wd w), w -= v (w -= local_lr (g + wd w) without momentum).
  virtual void lars_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, float local_lr,
                           float weight_decay, float momentum) const;

 protected:
  [[noreturn]] void missing(const char* op) const;

 private:
  DeviceType device_;
};

// The table of `device`'s kind (the CPU's, or a device's, whose missing kernels throw).
const Kernels& kernels_for(const Device& device);
inline const Kernels& kernels_for(const Tensor& t) { return kernels_for(t.device()); }

}  // namespace tessera
