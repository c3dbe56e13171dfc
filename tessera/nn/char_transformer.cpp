#include "tessera/nn/char_transformer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>

namespace tessera::nn {

Tensor position_ids(int64_t T, Device device) {
  if (device.is_cpu()) return arange(T);
  static std::mutex mutex;
  static auto* cached = new std::map<std::string, Tensor>();  // never destroyed: device memory at exit
  std::lock_guard lock(mutex);
  Tensor& ids = (*cached)[device.str()];
  if (!ids.defined() || ids.numel() < T) ids = arange(T).to(device);
  return slice(ids, 0, 0, T);
}

GptEmbedding::GptEmbedding(std::shared_ptr<Embedding> wte_in, std::shared_ptr<Embedding> wpe_in,
                           std::shared_ptr<Dropout> drop_in) {
  wte = register_module("wte", std::move(wte_in));
  wpe = register_module("wpe", std::move(wpe_in));
  drop = register_module("drop", std::move(drop_in));
}

Tensor sequence_positions(int64_t T, Device device, int64_t context, int part, int parts,
                          parallel::context::ContextAttention attention, const char* who) {
  TESSERA_CHECK(T >= 1 && T * parts <= context, "[", who, "] sequence length ", T * parts, parts > 1 ? " (" : "",
                parts > 1 ? std::to_string(parts) + " parts of " + std::to_string(T) + ")" : "", " exceeds the context ",
                context);
  if (parts == 1) return position_ids(T, device);
  Tensor positions = from_vector(parallel::context::context_positions(part, parts, T, attention), {T});
  return device.is_cpu() ? positions : positions.to(device);
}

Tensor GptEmbedding::forward(const Tensor& ids) {
  TESSERA_CHECK(ids.dtype() == DType::Int64 && ids.dim() == 2, "[CharTransformer] expected int64 ids (B, T), got ",
                dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  const Tensor positions = sequence_positions(ids.shape()[1], ids.device(), wpe->weight.shape()[0], part, parts,
                                              attention, "CharTransformer");
  return drop->forward(add(wte->forward(ids), wpe->forward(positions)));  // (B, T, C) + (T, C)
}

GptHead::GptHead(std::shared_ptr<LayerNorm> ln_f_in, std::shared_ptr<Linear> lm_head_in) {
  ln_f = register_module("ln_f", std::move(ln_f_in));
  lm_head = register_module("lm_head", std::move(lm_head_in));
}

CharTransformer::CharTransformer(const CharTransformerConfig& c) : config(c) {
  TESSERA_CHECK(c.vocab_size > 0 && c.context > 0 && c.layers > 0, "[CharTransformer] vocab_size, context and layers "
                "must be positive, got ", c.vocab_size, ", ", c.context, ", ", c.layers);
  // Registered here, in GPT-2's order and names; the chain's layers below share them.
  auto wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.embed_dim));
  auto wpe = register_module("wpe", std::make_shared<Embedding>(c.context, c.embed_dim));
  auto drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
  auto h = std::make_shared<Sequential>();
  for (int64_t i = 0; i < c.layers; ++i) {
    blocks_.push_back(std::make_shared<TransformerBlock>(c.embed_dim, c.heads, c.dropout, c.moe));
    blocks_.back()->checkpoint_activations = c.checkpoint_activations;
    h->push_back(blocks_.back());
  }
  register_module("h", h);
  auto ln_f = register_module("ln_f", std::make_shared<LayerNorm>(Shape{c.embed_dim}));
  auto lm_head = register_module("lm_head", std::make_shared<Linear>(c.embed_dim, c.vocab_size, false));
  embed_ = std::make_shared<GptEmbedding>(wte, wpe, drop);
  head_ = std::make_shared<GptHead>(ln_f, lm_head);
}

Tensor CharTransformer::forward(const Tensor& ids) {
  Tensor x = embed_->forward(ids);
  for (auto& block : blocks_) x = block->forward(x);
  return head_->forward(x);
}

void CharTransformer::spread_sequence(dist::ProcessGroupPtr group, parallel::context::ContextAttention attention) {
  TESSERA_CHECK(group != nullptr, "[context parallel] spread_sequence needs a process group");
  for (auto& block : blocks_) block->attn->spread_sequence(group, attention);
  embed_->part = group->rank();
  embed_->parts = group->size();
  embed_->attention = attention;
}

LayerChain CharTransformer::layer_chain() const {
  LayerChain chain{{"", embed_}};
  for (size_t i = 0; i < blocks_.size(); ++i) chain.push_back({"h." + std::to_string(i) + ".", blocks_[i]});
  chain.push_back({"", head_});
  return chain;
}

namespace {

// One id from softmax(logits / temperature), kept to the top_k most likely when top_k > 0.
int64_t sample_next_token(std::vector<float> scaled, float temperature, int64_t top_k, Generator& gen) {
  TESSERA_CHECK(!scaled.empty(), "[generate] no logits to sample from");
  for (float& v : scaled) v /= temperature;
  if (top_k > 0 && top_k < static_cast<int64_t>(scaled.size())) {
    std::vector<float> sorted = scaled;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<float>());
    float cutoff = sorted[top_k - 1];
    for (float& v : scaled)
      if (v < cutoff) v = -INFINITY;
  }
  float mx = *std::max_element(scaled.begin(), scaled.end());
  double total = 0;
  for (float& v : scaled) total += (v = std::exp(v - mx));
  double r = gen.uniform() * total, acc = 0;
  for (size_t i = 0; i < scaled.size(); ++i) {
    acc += scaled[i];
    if (r < acc) return static_cast<int64_t>(i);
  }
  return static_cast<int64_t>(scaled.size()) - 1;
}

}  // namespace

std::vector<int64_t> CharTransformer::generate(std::vector<int64_t> ids, int64_t count, float temperature,
                                               int64_t top_k, Generator& gen) {
  return generate_tokens(*this, [this](const Tensor& window) { return forward(window); }, config.context,
                         std::move(ids), count, temperature, top_k, gen);
}

std::vector<int64_t> generate_tokens(Module& model, const std::function<Tensor(const Tensor&)>& logits_of,
                                     int64_t context, std::vector<int64_t> ids, int64_t count, float temperature,
                                     int64_t top_k, Generator& gen) {
  TESSERA_CHECK(!ids.empty(), "[generate] needs a non-empty prompt");
  TESSERA_CHECK(temperature > 0, "[generate] temperature must be positive, got ", temperature);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  for (int64_t step = 0; step < count; ++step) {
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - context);
    std::vector<int64_t> window(ids.begin() + start, ids.end());
    Tensor logits = logits_of(from_vector(window, {1, static_cast<int64_t>(window.size())}));
    ids.push_back(sample_next_token(slice(logits, 1, -1, logits.shape()[1]).to_vector<float>(), temperature, top_k, gen));
  }
  model.train(was_training);
  return ids;
}

}  // namespace tessera::nn
