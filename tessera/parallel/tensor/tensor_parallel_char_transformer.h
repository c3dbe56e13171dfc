// CharTransformer split over a tensor-parallel group (Megatron-LM): the token embedding and the
// lm_head split by vocabulary rows, attention by heads, the MLP by its hidden features; the position
// embedding and the LayerNorms replicated. Built from a full model, which every rank constructs from
// the same seed, it computes what that model computes: the same loss, and after the same optimizer
// steps the same full_state_dict(). Parameter names are the full model's ("h.0.attn.qkv.weight"),
// each holding this rank's shard, and the layer chain has the full model's layers and prefixes, so
// pipeline parallelism can cut it into stages (its last layer yields local logits).
//
// Every rank of the group runs the same calls in the same order (forward, loss, backward,
// full_state_dict). Dropout draws from the process-wide generator, so with dropout > 0 the ranks
// must be seeded alike to drop the same replicated activations.
//
// With sequence parallelism (sequence_parallel.h) the embedding leaves each rank its tokens
// (B, T/world, C), the blocks and ln_f work on them, and lm_head gathers them back: the logits are
// (B, T, V_local) either way. token_parameters() then have partial gradients, which the caller adds
// up over the group after the backward (sum_partial_gradients); T must be a multiple of the group's
// size.
#pragma once
#include "tessera/nn/char_transformer.h"
#include "tessera/parallel/tensor/column_parallel_linear.h"
#include "tessera/parallel/tensor/parallel_transformer_block.h"
#include "tessera/parallel/tensor/replicated.h"
#include "tessera/parallel/tensor/vocab_parallel_embedding.h"

namespace tessera::parallel::tensor {

// The first layer of the chain: ids (B, T) int64 -> dropout(wte(ids) + wpe(0..T-1)) (B, T, C), replicated;
// with a `sequence_group`, this rank's tokens of it (B, T/world, C).
class ParallelGptEmbedding : public nn::Module {
 public:
  ParallelGptEmbedding(std::shared_ptr<VocabParallelEmbedding> wte, std::shared_ptr<ReplicatedEmbedding> wpe,
                       std::shared_ptr<nn::Dropout> drop, dist::ProcessGroupPtr sequence_group = nullptr);
  Tensor forward(const Tensor& ids) override;
  std::string name() const override { return "ParallelGptEmbedding"; }
  std::shared_ptr<VocabParallelEmbedding> wte;
  std::shared_ptr<ReplicatedEmbedding> wpe;
  std::shared_ptr<nn::Dropout> drop;
  // Context parallelism, as GptEmbedding's: the ids are part `part` of `parts` of each sequence.
  int part = 0, parts = 1;
  parallel::context::ContextAttention attention = parallel::context::ContextAttention::Ring;

 private:
  dist::ProcessGroupPtr sequence_group_;
};

// The last layer of the chain: (B, T, C) -> lm_head(ln_f(x)), this rank's vocabulary slice (B, T, V_local).
class ParallelGptHead : public nn::Module {
 public:
  ParallelGptHead(std::shared_ptr<nn::LayerNorm> ln_f, std::shared_ptr<ColumnParallelLinear> lm_head);
  Tensor forward(const Tensor& x) override { return lm_head->forward(ln_f->forward(x)); }
  std::string name() const override { return "ParallelGptHead"; }
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<ColumnParallelLinear> lm_head;
};

class TensorParallelCharTransformer : public nn::Module {
 public:
  // Copies this rank's shards of `full`; heads must be divisible by the group's size and the
  // vocabulary at least as large.
  TensorParallelCharTransformer(const nn::CharTransformer& full, dist::ProcessGroupPtr group,
                                SequenceParallel sequence = {});
  // ids (B, T) int64 -> this rank's logits (B, T, vocab_end - vocab_begin).
  Tensor forward(const Tensor& ids) override;
  std::string name() const override { return "TensorParallelCharTransformer"; }
  // The mean cross-entropy of targets (B, T) int64, with vocab_parallel_cross_entropy: no rank
  // gathers the logits. The same value on every rank.
  Tensor loss(const Tensor& ids, const Tensor& targets);
  // The gathered logits (B, T, vocab), for evaluation and generation.
  Tensor full_logits(const Tensor& ids);
  // As CharTransformer::generate, on every rank alike (the same generator state gives the same tokens);
  // not under sequence parallelism (its windows take every length).
  std::vector<int64_t> generate(std::vector<int64_t> prompt, int64_t count, float temperature, int64_t top_k,
                                Generator& gen);
  // The embedding (prefix ""), block i ("h.i."), the head (""), sharing this model's parameters.
  nn::LayerChain layer_chain() const;
  // Under sequence parallelism, the parameters used on this rank's tokens only (the LayerNorms, the
  // row-parallel biases), whose gradients are partial sums over the group; empty without it.
  std::vector<Tensor> token_parameters() const;
  // CharTransformer::state_dict()'s names and full shapes, shards gathered: a collective.
  nn::StateDict full_state_dict() const;
  // Loads a full model's state_dict, keeping this rank's shards.
  void load_full_state_dict(const nn::StateDict& state);

  const dist::ProcessGroupPtr& group() const { return group_; }
  int64_t vocab_begin() const { return embed_->wte->vocab_begin; }
  int64_t vocab_end() const { return embed_->wte->vocab_end; }
  nn::CharTransformerConfig config;

 private:
  dist::ProcessGroupPtr group_;
  SequenceParallel sequence_;
  std::shared_ptr<ParallelGptEmbedding> embed_;
  std::vector<std::shared_ptr<ParallelTransformerBlock>> blocks_;
  std::shared_ptr<ParallelGptHead> head_;
};

}  // namespace tessera::parallel::tensor
