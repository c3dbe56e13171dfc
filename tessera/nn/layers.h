// The standard layers. Each is a thin Module over one op in tessera/ops/ops.h; shapes follow PyTorch.
#pragma once
#include <initializer_list>

#include "tessera/nn/module.h"
#include "tessera/ops/ops.h"

namespace tessera::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;  // (..., in) -> (..., out)
  std::string name() const override { return "Linear"; }
  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined
};

struct Conv2dConfig {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dConfig config = {});
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, OC, OH, OW)
  std::string name() const override { return "Conv2d"; }
  Tensor weight;  // (OC, C/groups, K, K)
  Tensor bias;
  Conv2dOptions options;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = -1, int64_t padding = 0);
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options); }
  std::string name() const override { return "MaxPool2d"; }
  Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = -1, int64_t padding = 0);
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, options); }
  std::string name() const override { return "AvgPool2d"; }
  Pool2dOptions options;
};

// BatchNorm over channel dim 1: BatchNorm1d takes (N, C) or (N, C, L), BatchNorm2d (N, C, H, W).
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t num_features, int64_t expected_dims_lo, int64_t expected_dims_hi, float eps = 1e-5f,
            float momentum = 0.1f);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BatchNorm"; }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  float eps, momentum;

 private:
  int64_t dims_lo_, dims_hi_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t n, float eps = 1e-5f, float momentum = 0.1f) : BatchNorm(n, 2, 3, eps, momentum) {}
  std::string name() const override { return "BatchNorm1d"; }
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t n, float eps = 1e-5f, float momentum = 0.1f) : BatchNorm(n, 4, 4, eps, momentum) {}
  std::string name() const override { return "BatchNorm2d"; }
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, float eps = 1e-5f, bool affine = true);
  Tensor forward(const Tensor& x) override { return layer_norm(x, normalized_shape, weight, bias, eps); }
  std::string name() const override { return "LayerNorm"; }
  Shape normalized_shape;
  Tensor weight, bias;
  float eps;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override { return embedding(weight, indices); }
  std::string name() const override { return "Embedding"; }
  Tensor weight;  // (V, D), N(0, 1) as PyTorch
};

class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  std::string name() const override { return "Dropout"; }
  float p;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string name() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }
  std::string name() const override { return "GELU"; }
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim, end_dim); }
  std::string name() const override { return "Flatten"; }
  int64_t start_dim, end_dim;
};

// Children named "0", "1", ... as in PyTorch, so state_dict keys match torch.nn.Sequential's.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> modules);
  void push_back(ModulePtr module);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return children().size(); }
  ModulePtr operator[](size_t i) const { return children().at(i).second; }
  // Its children as a chain, prefixes "0.", "1.", ...
  LayerChain layer_chain() const;
};

}  // namespace tessera::nn
