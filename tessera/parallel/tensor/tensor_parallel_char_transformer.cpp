#include "tessera/parallel/tensor/tensor_parallel_char_transformer.h"

#include <algorithm>

#include "tessera/parallel/tensor/mappings.h"
#include "tessera/parallel/tensor/sequence_parallel.h"
#include "tessera/parallel/tensor/sharding.h"
#include "tessera/parallel/tensor/vocab_parallel_cross_entropy.h"

namespace tessera::parallel::tensor {

ParallelGptEmbedding::ParallelGptEmbedding(std::shared_ptr<VocabParallelEmbedding> wte_in,
                                           std::shared_ptr<ReplicatedEmbedding> wpe_in,
                                           std::shared_ptr<nn::Dropout> drop_in,
                                           dist::ProcessGroupPtr sequence_group)
    : sequence_group_(std::move(sequence_group)) {
  wte = register_module("wte", std::move(wte_in));
  wpe = register_module("wpe", std::move(wpe_in));
  drop = register_module("drop", std::move(drop_in));
}

Tensor ParallelGptEmbedding::forward(const Tensor& ids) {
  TESSERA_CHECK(ids.defined() && ids.dtype() == DType::Int64 && ids.dim() == 2, "[TensorParallelCharTransformer] "
                "expected int64 ids (B, T), got ", ids.defined() ? dtype_name(ids.dtype()) + std::string(" ") +
                shape_str(ids.shape()) : "an undefined tensor");
  const Tensor positions = nn::sequence_positions(ids.shape()[1], ids.device(), wpe->weight.shape()[0], part, parts,
                                                  attention, "TensorParallelCharTransformer");
  Tensor x = drop->forward(add(wte->forward(ids), wpe->forward(positions)));  // (B, T, C) + (T, C)
  return sequence_group_ ? scatter_to_sequence_parallel_region(x, sequence_group_) : x;
}

ParallelGptHead::ParallelGptHead(std::shared_ptr<nn::LayerNorm> ln_f_in, std::shared_ptr<ColumnParallelLinear> head) {
  ln_f = register_module("ln_f", std::move(ln_f_in));
  lm_head = register_module("lm_head", std::move(head));
}

TensorParallelCharTransformer::TensorParallelCharTransformer(const nn::CharTransformer& full,
                                                             dist::ProcessGroupPtr group, SequenceParallel sequence)
    : config(full.config), group_(std::move(group)), sequence_(sequence) {
  TESSERA_CHECK(group_ != nullptr, "[TensorParallelCharTransformer] needs a tensor-parallel process group, got null");
  nn::LayerChain chain = full.layer_chain();
  auto embed = std::dynamic_pointer_cast<nn::GptEmbedding>(chain.front().module);
  auto head = std::dynamic_pointer_cast<nn::GptHead>(chain.back().module);
  TESSERA_ASSERT(embed && head, "[TensorParallelCharTransformer] CharTransformer's chain changed its layer types");
  // Registered in CharTransformer's order and names, so state_dict keys (and order) match its.
  auto wte = register_module("wte", std::make_shared<VocabParallelEmbedding>(*embed->wte, group_));
  auto wpe = register_module("wpe", std::make_shared<ReplicatedEmbedding>(*embed->wpe));
  auto drop = register_module("drop", std::make_shared<nn::Dropout>(embed->drop->p));
  auto h = std::make_shared<nn::Sequential>();
  for (size_t i = 1; i + 1 < chain.size(); ++i) {
    auto block = std::dynamic_pointer_cast<nn::TransformerBlock>(chain[i].module);
    TESSERA_ASSERT(block, "[TensorParallelCharTransformer] layer ", i, " of CharTransformer's chain is no block");
    blocks_.push_back(std::make_shared<ParallelTransformerBlock>(*block, group_, sequence_));
    h->push_back(blocks_.back());
  }
  register_module("h", h);
  auto ln_f = register_module("ln_f", replicate(*head->ln_f));
  auto lm_head = register_module("lm_head", std::make_shared<ColumnParallelLinear>(
                                                *head->lm_head, group_, ColumnParallelOptions{false, 1, sequence_}));
  embed_ = std::make_shared<ParallelGptEmbedding>(wte, wpe, drop, sequence_.enabled ? group_ : nullptr);
  embed_->part = embed->part;  // context parallelism of the whole model carries over
  embed_->parts = embed->parts;
  embed_->attention = embed->attention;
  head_ = std::make_shared<ParallelGptHead>(ln_f, lm_head);
}

Tensor TensorParallelCharTransformer::forward(const Tensor& ids) {
  Tensor x = embed_->forward(ids);
  for (auto& block : blocks_) x = block->forward(x);
  return head_->forward(x);  // (B, T, V_local)
}

Tensor TensorParallelCharTransformer::loss(const Tensor& ids, const Tensor& targets) {
  TESSERA_CHECK(targets.defined() && ids.defined() && targets.shape() == ids.shape(), "[TensorParallelCharTransformer] "
                "targets must have the shape of the ids ", ids.defined() ? shape_str(ids.shape()) : "(undefined)",
                ", got ", targets.defined() ? shape_str(targets.shape()) : "an undefined tensor");
  Tensor logits = forward(ids);
  const int64_t local_vocab = logits.shape().back();
  return vocab_parallel_cross_entropy(reshape(logits, {-1, local_vocab}), reshape(targets, {-1}), group_);
}

Tensor TensorParallelCharTransformer::full_logits(const Tensor& ids) {
  return gather_from_tensor_parallel_region(forward(ids), group_, shard_sizes(config.vocab_size, group_->size()));
}

std::vector<int64_t> TensorParallelCharTransformer::generate(std::vector<int64_t> ids, int64_t count,
                                                             float temperature, int64_t top_k, Generator& gen) {
  TESSERA_CHECK(!sequence_.enabled, "[TensorParallelCharTransformer] generate feeds windows of every length, which "
                "sequence parallelism cannot cut over the group; sample from a model built without it, or from the "
                "checkpoint with `tessera generate`");
  return nn::generate_tokens(*this, [this](const Tensor& window) { return full_logits(window); }, config.context,
                             std::move(ids), count, temperature, top_k, gen);
}

std::vector<Tensor> TensorParallelCharTransformer::token_parameters() const {
  if (!sequence_.enabled) return {};
  std::vector<Tensor> out;
  for (const auto& block : blocks_)
    for (const Tensor& t : block->token_parameters()) out.push_back(t);
  for (const Tensor& t : head_->ln_f->parameters()) out.push_back(t);
  return out;
}

nn::LayerChain TensorParallelCharTransformer::layer_chain() const {
  nn::LayerChain chain{{"", embed_}};
  for (size_t i = 0; i < blocks_.size(); ++i) chain.push_back({"h." + std::to_string(i) + ".", blocks_[i]});
  chain.push_back({"", head_});
  return chain;
}

nn::StateDict TensorParallelCharTransformer::full_state_dict() const {
  return tensor::full_state_dict(*this, *group_);
}

void TensorParallelCharTransformer::load_full_state_dict(const nn::StateDict& state) {
  tensor::load_full_state_dict(*this, state, group_->rank(), group_->size());
}

}  // namespace tessera::parallel::tensor
