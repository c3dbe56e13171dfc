#include "tessera/nn/char_transformer.h"

#include <algorithm>
#include <cmath>

namespace tessera::nn {

CharTransformer::CharTransformer(const CharTransformerConfig& c) : config(c) {
  TESSERA_CHECK(c.vocab_size > 0 && c.context > 0 && c.layers > 0, "[CharTransformer] vocab_size, context and layers "
                "must be positive, got ", c.vocab_size, ", ", c.context, ", ", c.layers);
  wte_ = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.embed_dim));
  wpe_ = register_module("wpe", std::make_shared<Embedding>(c.context, c.embed_dim));
  drop_ = register_module("drop", std::make_shared<Dropout>(c.dropout));
  auto h = std::make_shared<Sequential>();
  for (int64_t i = 0; i < c.layers; ++i) {
    blocks_.push_back(std::make_shared<TransformerBlock>(c.embed_dim, c.heads, c.dropout));
    h->push_back(blocks_.back());
  }
  register_module("h", h);
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(Shape{c.embed_dim}));
  lm_head_ = register_module("lm_head", std::make_shared<Linear>(c.embed_dim, c.vocab_size, false));
}

Tensor CharTransformer::forward(const Tensor& ids) {
  TESSERA_CHECK(ids.dtype() == DType::Int64 && ids.dim() == 2, "[CharTransformer] expected int64 ids (B, T), got ",
                dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  const int64_t T = ids.shape()[1];
  TESSERA_CHECK(T >= 1 && T <= config.context, "[CharTransformer] sequence length ", T, " exceeds the context ",
                config.context);
  Tensor x = add((*wte_)(ids), (*wpe_)(arange(T)));  // (B, T, C) + (T, C)
  x = (*drop_)(x);
  for (auto& block : blocks_) x = (*block)(x);
  return (*lm_head_)((*ln_f_)(x));
}

std::vector<int64_t> CharTransformer::generate(std::vector<int64_t> ids, int64_t count, float temperature,
                                               int64_t top_k, Generator& gen) {
  TESSERA_CHECK(!ids.empty(), "[generate] needs a non-empty prompt");
  TESSERA_CHECK(temperature > 0, "[generate] temperature must be positive, got ", temperature);
  NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  for (int64_t step = 0; step < count; ++step) {
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - config.context);
    std::vector<int64_t> window(ids.begin() + start, ids.end());
    Tensor logits = forward(from_vector(window, {1, static_cast<int64_t>(window.size())}));
    std::vector<float> last = slice(logits, 1, -1, logits.shape()[1]).to_vector<float>();
    std::vector<float> scaled(last.size());
    for (size_t i = 0; i < last.size(); ++i) scaled[i] = last[i] / temperature;
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
    int64_t pick = static_cast<int64_t>(scaled.size()) - 1;
    for (size_t i = 0; i < scaled.size(); ++i) {
      acc += scaled[i];
      if (r < acc) {
        pick = static_cast<int64_t>(i);
        break;
      }
    }
    ids.push_back(pick);
  }
  train(was_training);
  return ids;
}

}  // namespace tessera::nn
