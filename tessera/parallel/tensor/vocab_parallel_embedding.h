// A token embedding whose vocabulary rows are split over the tensor-parallel group (Megatron-LM's
// VocabParallelEmbedding): rank r holds rows [begin, end) = shard_range(V, r, world) of the (V, D)
// table. Each rank looks up the ids it holds, gives zero rows for the others, and an all-reduce sum
// joins them, so every rank gets the full (..., D) embedding. Uneven splits are fine (V = 13, world 2).
#pragma once
#include "tessera/dist/process_group.h"
#include "tessera/nn/layers.h"
#include "tessera/parallel/tensor/sharding.h"

namespace tessera::parallel::tensor {

class VocabParallelEmbedding : public nn::Module, public ShardedLayer {
 public:
  // This rank's rows of `full` (copied). Needs at least one row per rank.
  VocabParallelEmbedding(const nn::Embedding& full, dist::ProcessGroupPtr group);
  Tensor forward(const Tensor& ids) override;  // ids int64 (...) in [0, V) -> (..., D)
  std::string name() const override { return "VocabParallelEmbedding"; }
  std::vector<std::pair<std::string, ShardSpec>> shard_specs() const override;
  const dist::ProcessGroupPtr& group() const { return group_; }

  int64_t vocab_size, embedding_dim;
  int64_t vocab_begin, vocab_end;  // the rows this rank holds
  Tensor weight;                   // (vocab_end - vocab_begin, D)

 private:
  dist::ProcessGroupPtr group_;
};

}  // namespace tessera::parallel::tensor
