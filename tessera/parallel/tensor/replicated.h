// Copies of the full model's layers that every tensor-parallel rank holds whole (LayerNorms, the
// position embedding). Made without random draws: the default generator is process-wide, and ranks
// that are threads build their layers at the same time.
#pragma once
#include <memory>

#include "tessera/nn/layers.h"

namespace tessera::parallel::tensor {

// An Embedding holding a copy of another's table (nn::Embedding's constructor would draw one).
class ReplicatedEmbedding : public nn::Module {
 public:
  explicit ReplicatedEmbedding(const nn::Embedding& full);
  Tensor forward(const Tensor& indices) override { return embedding(weight, indices); }
  std::string name() const override { return "ReplicatedEmbedding"; }
  Tensor weight;  // (V, D)
};

std::shared_ptr<nn::LayerNorm> replicate(const nn::LayerNorm& full);

}  // namespace tessera::parallel::tensor
