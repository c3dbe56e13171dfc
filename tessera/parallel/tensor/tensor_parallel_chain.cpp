#include "tessera/parallel/tensor/tensor_parallel_chain.h"

#include "tessera/parallel/tensor/sharding.h"
#include "tessera/parallel/tensor/tensor_parallel_char_transformer.h"
#include "tessera/parallel/tensor/vocab_parallel_cross_entropy.h"

namespace tessera::parallel::tensor {

TensorParallelChain tensor_parallel_chain(const nn::CharTransformer& model, dist::ProcessGroupPtr group,
                                          SequenceParallel sequence) {
  // The layers own their shards; the model object that cut them is not needed afterwards.
  TensorParallelCharTransformer sharded(model, group, sequence);
  TensorParallelChain out;
  out.layers = sharded.layer_chain();
  out.token_parameters = sharded.token_parameters();
  out.gather_layer = [group](const nn::NamedLayer& layer) { return full_state_dict(*layer.module, *group); };
  out.loss = [group](const Tensor& local_logits, const Tensor& targets) {
    return vocab_parallel_cross_entropy(local_logits, targets, group);
  };
  return out;
}

}  // namespace tessera::parallel::tensor
