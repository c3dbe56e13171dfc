#include "tessera/ops/kernels.h"

#include "tessera/backend/cpu/cpu_kernels.h"
#include "tessera/backend/cuda/cuda_kernels.h"

namespace tessera {

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg: return "neg";
    case UnaryOp::kExp: return "exp";
    case UnaryOp::kLog: return "log";
    case UnaryOp::kSqrt: return "sqrt";
    case UnaryOp::kTanh: return "tanh";
    case UnaryOp::kSigmoid: return "sigmoid";
    case UnaryOp::kRelu: return "relu";
    case UnaryOp::kGelu: return "gelu";
    case UnaryOp::kAddScalar: return "add";
    case UnaryOp::kMulScalar: return "mul";
    case UnaryOp::kPowScalar: return "pow";
    case UnaryOp::kGreaterThan: return "gt";
    case UnaryOp::kNonzero: return "nonzero";
  }
  return "unary";
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "add";
    case BinaryOp::kSub: return "sub";
    case BinaryOp::kMul: return "mul";
    case BinaryOp::kDiv: return "div";
    case BinaryOp::kPow: return "pow";
    case BinaryOp::kEqual: return "eq";
    case BinaryOp::kKeepWhere: return "where";
    case BinaryOp::kDropWhere: return "where";
    case BinaryOp::kFillWhere: return "masked_fill";
    case BinaryOp::kDivisorGrad: return "div (backward)";
    case BinaryOp::kPowScalarGrad: return "pow (backward)";
    case BinaryOp::kPowBaseGrad: return "pow (backward)";
    case BinaryOp::kPowExponentGrad: return "pow (backward)";
    case BinaryOp::kSqrtGrad: return "sqrt (backward)";
    case BinaryOp::kTanhGrad: return "tanh (backward)";
    case BinaryOp::kSigmoidGrad: return "sigmoid (backward)";
    case BinaryOp::kReluGrad: return "relu (backward)";
    case BinaryOp::kGeluGrad: return "gelu (backward)";
  }
  return "binary";
}

void Kernels::missing(const char* op) const {
  const std::string device = device_ == DeviceType::CPU ? "cpu" : "cuda";
  throw NotSupportedError(detail::concat("[", op, "] has no kernel on ", device,
                                 " yet; copy the tensors to the CPU (.cpu()) for this op"));
}

const Kernels& kernels_for(const Device& device) {
  if (device.type == DeviceType::CUDA) return cuda::cuda_kernels();
  return cpu::cpu_kernels();
}

// ---- the entries a device has not overridden ----

Tensor Kernels::unary(UnaryOp op, const Tensor& a, float scalar) const {
  missing(op_name(op));
}

Tensor Kernels::binary(BinaryOp op, const Tensor& a, const Tensor& b, float scalar) const {
  missing(op_name(op));
}

void Kernels::copy(Tensor& dst, const Tensor& src) const {
  missing("copy");
}

void Kernels::fill(Tensor& t, float value) const {
  missing("fill");
}

void Kernels::add_scaled(Tensor& dst, const Tensor& src, float alpha) const {
  missing("add_scaled");
}

void Kernels::scale(Tensor& dst, float value) const {
  missing("scale");
}

Tensor Kernels::sum(const Tensor& t, const Shape& dims, bool keepdim) const {
  missing("sum");
}

MaxResult Kernels::max(const Tensor& t, int64_t dim, bool keepdim) const {
  missing("max");
}

Tensor Kernels::max_backward(const Tensor& g, const Tensor& indices, const Shape& in_shape, int64_t dim,
                             bool keepdim) const {
  missing("max_backward");
}

double Kernels::squared_norm(const Tensor& t) const {
  missing("squared_norm");
}

Tensor Kernels::softmax(const Tensor& x, bool log_space) const {
  missing("softmax");
}

Tensor Kernels::softmax_backward(const Tensor& out, const Tensor& g, bool log_space) const {
  missing("softmax_backward");
}

Tensor Kernels::attention_weights(const Tensor& scores, float scale, bool causal) const {
  missing("attention_weights");
}

Tensor Kernels::attention_weights_backward(const Tensor& out, const Tensor& g, float scale, bool causal) const {
  missing("attention_weights_backward");
}

CrossEntropyResult Kernels::cross_entropy(const Tensor& logits, const Tensor& targets,
                                          const CrossEntropyOptions& opt) const {
  missing("cross_entropy");
}

Tensor Kernels::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                       const Tensor& g, const CrossEntropyOptions& opt, int64_t count) const {
  missing("cross_entropy_backward");
}

WithSaved Kernels::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t D, float eps) const {
  missing("layer_norm");
}

LayerGrads Kernels::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats,
                                       const Tensor& g, int64_t D, bool weight_grad, bool bias_grad) const {
  missing("layer_norm_backward");
}

WithSaved Kernels::batch_norm(const Tensor& x, Tensor& running_mean, Tensor& running_var,
                              const Tensor& weight, const Tensor& bias, bool training, float momentum,
    float eps) const {
  missing("batch_norm");
}

LayerGrads Kernels::batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats,
                                       const Tensor& g, bool training, bool weight_grad, bool bias_grad) const {
  missing("batch_norm_backward");
}

Tensor Kernels::matmul(const Tensor& a, const Tensor& b, const Tensor& bias, DType precision) const {
  missing("matmul");
}

Tensor Kernels::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& opt,
                       DType precision) const {
  missing("conv2d");
}

LayerGrads Kernels::conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& g, const Conv2dOptions& opt,
                                    DType precision, bool input_grad, bool weight_grad, bool bias_grad) const {
  missing("conv2d_backward");
}

WithSaved Kernels::max_pool2d(const Tensor& x, const Pool2dOptions& opt, bool relu_first) const {
  missing(relu_first ? "relu_max_pool2d" : "max_pool2d");
}

Tensor Kernels::max_pool2d_backward(const Tensor& g, const Tensor& saved, const Shape& in_shape,
                                    const Pool2dOptions& opt, bool relu_first) const {
  missing("max_pool2d_backward");
}

Tensor Kernels::avg_pool2d(const Tensor& x, const Pool2dOptions& opt) const { missing("avg_pool2d"); }

Tensor Kernels::avg_pool2d_backward(const Tensor& g, const Shape& in_shape, const Pool2dOptions& opt) const {
  missing("avg_pool2d_backward");
}

Tensor Kernels::embedding(const Tensor& weight, const Tensor& indices) const {
  missing("embedding");
}

Tensor Kernels::embedding_backward(const Tensor& g, const Tensor& indices, int64_t num_embeddings) const {
  missing("embedding_backward");
}

Tensor Kernels::index_select(const Tensor& t, int64_t dim, const Tensor& indices) const {
  missing("index_select");
}

Tensor Kernels::index_select_backward(const Tensor& g, const Shape& in_shape, int64_t dim,
                                      const Tensor& indices) const {
  missing("index_select_backward");
}

Tensor Kernels::dropout_mask(const Shape& shape, const Device& device, float p, Generator& gen) const {
  missing("dropout_mask");
}

void Kernels::sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) const {
  missing("sgd_update");
}

void Kernels::adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                          const AdamStep& s) const {
  missing("adam_update");
}

std::pair<double, double> Kernels::lamb_moments(const Tensor& param, const Tensor& grad, Tensor& exp_avg,
                                                Tensor& exp_avg_sq, const LambStep& s) const {
  missing("lamb_moments");
}

void Kernels::lamb_apply(Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const LambStep& s,
                         float step) const {
  missing("lamb_apply");
}

void Kernels::lars_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, float local_lr,
                          float weight_decay, float momentum) const {
  missing("lars_update");
}

}  // namespace tessera
