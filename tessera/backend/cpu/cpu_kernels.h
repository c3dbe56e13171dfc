// The CPU's kernel table (ops/kernels.h): every kernel, on the intra-op thread pool. The entries are
// spread over files by kind: cpu_elementwise.cpp (elementwise, copies, fills), cpu_reduce.cpp,
// cpu_rows.cpp (softmax, attention, losses, normalisation), cpu_index.cpp (embedding, index_select,
// dropout's mask), cpu_optimizer.cpp (the fused optimizer updates) and cpu_via_ops.cpp (matmul, convolution and
// pooling through their ops).
#pragma once
#include "tessera/ops/kernels.h"

namespace tessera::cpu {

class CpuKernels final : public Kernels {
 public:
  CpuKernels() : Kernels(DeviceType::CPU) {}
  Tensor unary(UnaryOp op, const Tensor& a, float scalar) const override;
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, float scalar) const override;
  void copy(Tensor& dst, const Tensor& src) const override;
  void fill(Tensor& t, float value) const override;
  void add_scaled(Tensor& dst, const Tensor& src, float alpha) const override;
  void scale(Tensor& dst, float value) const override;
  Tensor sum(const Tensor& t, const Shape& dims, bool keepdim) const override;
  MaxResult max(const Tensor& t, int64_t dim, bool keepdim) const override;
  Tensor max_backward(const Tensor& g, const Tensor& indices, const Shape& in_shape, int64_t dim,
                      bool keepdim) const override;
  double squared_norm(const Tensor& t) const override;
  Tensor softmax(const Tensor& x, bool log_space) const override;
  Tensor softmax_backward(const Tensor& out, const Tensor& g, bool log_space) const override;
  Tensor attention_weights(const Tensor& scores, float scale, bool causal) const override;
  Tensor attention_weights_backward(const Tensor& out, const Tensor& g, float scale, bool causal) const override;
  CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets,
                                   const CrossEntropyOptions& opt) const override;
  Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                const Tensor& g, const CrossEntropyOptions& opt, int64_t count) const override;
  WithSaved layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t D,
                       float eps) const override;
  LayerGrads layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats, const Tensor& g,
                                int64_t D, bool weight_grad, bool bias_grad) const override;
  WithSaved batch_norm(const Tensor& x, Tensor& running_mean, Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, float momentum, float eps) const override;
  LayerGrads batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats, const Tensor& g,
                                bool training, bool weight_grad, bool bias_grad) const override;
  Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias, DType precision) const override;
  Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& opt,
                DType precision) const override;
  LayerGrads conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& g, const Conv2dOptions& opt,
                             DType precision, bool input_grad, bool weight_grad, bool bias_grad) const override;
  WithSaved max_pool2d(const Tensor& x, const Pool2dOptions& opt, bool relu_first) const override;
  Tensor max_pool2d_backward(const Tensor& g, const Tensor& saved, const Shape& in_shape, const Pool2dOptions& opt,
                             bool relu_first) const override;
  Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt) const override;
  Tensor avg_pool2d_backward(const Tensor& g, const Shape& in_shape, const Pool2dOptions& opt) const override;
  Tensor embedding(const Tensor& weight, const Tensor& indices) const override;
  Tensor embedding_backward(const Tensor& g, const Tensor& indices, int64_t num_embeddings) const override;
  Tensor index_select(const Tensor& t, int64_t dim, const Tensor& indices) const override;
  Tensor index_select_backward(const Tensor& g, const Shape& in_shape, int64_t dim,
                               const Tensor& indices) const override;
  Tensor dropout_mask(const Shape& shape, const Device& device, float p, Generator& gen) const override;
  void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) const override;
  void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                   const AdamStep& s) const override;
  std::pair<double, double> lamb_moments(const Tensor& param, const Tensor& grad, Tensor& exp_avg,
                                         Tensor& exp_avg_sq, const LambStep& s) const override;
  void lamb_apply(Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const LambStep& s,
                  float step) const override;
  void lars_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, float local_lr,
                   float weight_decay, float momentum) const override;
};

const Kernels& cpu_kernels();

}  // namespace tessera::cpu
