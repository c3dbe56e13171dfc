// A GPT-style character-level language model: token and position embeddings, pre-norm Transformer
// blocks, a final LayerNorm and a linear head. Parameter names follow GPT-2's (wte, wpe, h.N, ln_f).
#pragma once
#include "tessera/nn/transformer.h"

namespace tessera::nn {

struct CharTransformerConfig {
  int64_t vocab_size = 0;
  int64_t context = 64;  // longest sequence
  int64_t embed_dim = 128;
  int64_t heads = 4;
  int64_t layers = 4;
  float dropout = 0.0f;
};

class CharTransformer : public Module {
 public:
  explicit CharTransformer(const CharTransformerConfig& config);
  // ids (B, T) int64 with T <= context -> logits (B, T, vocab)
  Tensor forward(const Tensor& ids) override;
  std::string name() const override { return "CharTransformer"; }
  // Samples `count` tokens after `prompt` ids: softmax(logits / temperature), optionally restricted to
  // the top_k most likely (0: all).
  std::vector<int64_t> generate(std::vector<int64_t> prompt, int64_t count, float temperature, int64_t top_k,
                                Generator& gen);
  CharTransformerConfig config;

 private:
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::vector<std::shared_ptr<TransformerBlock>> blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Linear> lm_head_;
};

}  // namespace tessera::nn
