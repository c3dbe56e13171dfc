#include "tessera/nn/layers.h"

#include <typeinfo>

#include "tessera/nn/init.h"

namespace tessera::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias) {
  TESSERA_CHECK(in_features > 0 && out_features > 0, "[Linear] features must be positive, got ", in_features, " -> ",
                out_features);
  weight = register_parameter("weight", init::uniform_fan_in({out_features, in_features}, in_features));
  if (with_bias) bias = register_parameter("bias", init::uniform_fan_in({out_features}, in_features));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t k, Conv2dConfig c) {
  TESSERA_CHECK(in_channels > 0 && out_channels > 0 && k > 0 && c.groups > 0 && in_channels % c.groups == 0 &&
                    out_channels % c.groups == 0,
                "[Conv2d] invalid configuration: in ", in_channels, ", out ", out_channels, ", kernel ", k, ", groups ",
                c.groups);
  int64_t fan_in = in_channels / c.groups * k * k;
  weight = register_parameter("weight", init::uniform_fan_in({out_channels, in_channels / c.groups, k, k}, fan_in));
  if (c.bias) bias = register_parameter("bias", init::uniform_fan_in({out_channels}, fan_in));
  options = {c.stride, c.stride, c.padding, c.padding, c.dilation, c.dilation, c.groups};
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, options); }

MaxPool2d::MaxPool2d(int64_t k, int64_t stride, int64_t padding) {
  int64_t s = stride < 0 ? k : stride;
  options = {k, k, s, s, padding, padding};
}

AvgPool2d::AvgPool2d(int64_t k, int64_t stride, int64_t padding) {
  int64_t s = stride < 0 ? k : stride;
  options = {k, k, s, s, padding, padding};
}

BatchNorm::BatchNorm(int64_t n, int64_t lo, int64_t hi, float eps_, float momentum_)
    : eps(eps_), momentum(momentum_), dims_lo_(lo), dims_hi_(hi) {
  TESSERA_CHECK(n > 0, "[BatchNorm] num_features must be positive, got ", n);
  weight = register_parameter("weight", ones({n}));
  bias = register_parameter("bias", zeros({n}));
  running_mean = register_buffer("running_mean", zeros({n}));
  running_var = register_buffer("running_var", ones({n}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::Int64));
}

Tensor BatchNorm::forward(const Tensor& x) {
  TESSERA_CHECK(x.dim() >= dims_lo_ && x.dim() <= dims_hi_, "[", name(), "] expected a ", dims_lo_,
                dims_lo_ == dims_hi_ ? "" : " or " + std::to_string(dims_hi_), "-D input, got ", shape_str(x.shape()));
  if (is_training()) {
    if (num_batches_tracked.device().is_cpu()) {
      num_batches_tracked.data<int64_t>()[0] += 1;
    } else {  // on a device: read, counted on the host, written back (one scalar)
      NoGradGuard no_grad;
      Tensor count = Tensor::empty({}, DType::Int64);
      count.data<int64_t>()[0] = num_batches_tracked.item<int64_t>() + 1;
      copy_(num_batches_tracked, count);
    }
  }
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum, eps);
}

LayerNorm::LayerNorm(Shape shape, float eps_, bool affine) : normalized_shape(std::move(shape)), eps(eps_) {
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim) {
  TESSERA_CHECK(num_embeddings > 0 && dim > 0, "[Embedding] sizes must be positive, got ", num_embeddings, "x", dim);
  weight = register_parameter("weight", init::normal({num_embeddings, dim}));
}

Dropout::Dropout(float p_) : p(p_) {
  TESSERA_CHECK(p >= 0.0f && p <= 1.0f, "[Dropout] probability must be in [0, 1], got ", p);
}

Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (auto& m : modules) push_back(m);
}

void Sequential::push_back(ModulePtr module) {
  TESSERA_CHECK(module != nullptr, "[Sequential] cannot add a null module");
  register_module(std::to_string(children().size()), std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  const auto& layers = children();
  for (size_t i = 0; i < layers.size(); ++i) {
    // A ReLU followed by max-pooling runs as one op (ops.h: relu_max_pool2d), equal bit for bit.
    // Exact types only: a subclass may have its own forward.
    const Module& layer = *layers[i].second;
    if (i + 1 < layers.size() && typeid(layer) == typeid(ReLU)) {
      const Module& next = *layers[i + 1].second;
      if (typeid(next) == typeid(MaxPool2d)) {
        h = relu_max_pool2d(h, static_cast<const MaxPool2d&>(next).options);
        ++i;
        continue;
      }
    }
    h = layers[i].second->forward(h);
  }
  return h;
}

LayerChain Sequential::layer_chain() const {
  LayerChain chain;
  for (const auto& [n, m] : children()) chain.push_back({n + ".", m});
  return chain;
}

}  // namespace tessera::nn
