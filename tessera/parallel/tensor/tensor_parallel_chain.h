// The transformer's chain of layers (CharTransformer::layer_chain) with each layer replaced by its
// tensor-parallel shard, for the model-parallel trainer: pipeline parallelism then cuts this chain
// exactly as it cuts the whole model's, so PP × TP needs nothing more.
#pragma once
#include <functional>

#include "tessera/dist/process_group.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/parallel/tensor/sequence_parallel.h"

namespace tessera::parallel::tensor {

struct TensorParallelChain {
  // Same length and prefixes as the model's chain; the last layer outputs logits sharded over the
  // vocabulary, (B, T, V_local).
  nn::LayerChain layers;
  // Collective over the tensor-parallel group: one layer of `layers` -> its whole tensors, named as
  // in the single-process layer's state_dict (prefix not included).
  std::function<nn::StateDict(const nn::NamedLayer&)> gather_layer;
  // The vocabulary-parallel cross-entropy: local logits (N, V_local), targets (N) -> mean loss.
  std::function<Tensor(const Tensor& local_logits, const Tensor& targets)> loss;
  // Under sequence parallelism, the parameters whose gradients are partial sums over the group
  // (sum_partial_gradients after each backward); empty without it.
  std::vector<Tensor> token_parameters;
};

// Collective over `group` (every rank calls it with the same, equally initialised model).
TensorParallelChain tensor_parallel_chain(const nn::CharTransformer& model, dist::ProcessGroupPtr group,
                                          SequenceParallel sequence = {});

}  // namespace tessera::parallel::tensor
