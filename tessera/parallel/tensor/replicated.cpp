#include "tessera/parallel/tensor/replicated.h"

namespace tessera::parallel::tensor {

ReplicatedEmbedding::ReplicatedEmbedding(const nn::Embedding& full) {
  NoGradGuard no_grad;
  weight = register_parameter("weight", clone(full.weight));
}

std::shared_ptr<nn::LayerNorm> replicate(const nn::LayerNorm& full) {
  auto copy = std::make_shared<nn::LayerNorm>(full.normalized_shape, full.eps, full.weight.defined());
  copy->load_state_dict(full.state_dict());
  return copy;
}

}  // namespace tessera::parallel::tensor
