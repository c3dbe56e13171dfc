// A GPT-style character-level language model: token and position embeddings, pre-norm Transformer
// blocks, a final LayerNorm and a linear head. Parameter names follow GPT-2's (wte, wpe, h.N, ln_f).
#pragma once
#include <functional>

#include "tessera/nn/transformer.h"

namespace tessera::nn {

struct CharTransformerConfig {
  int64_t vocab_size = 0;
  int64_t context = 64;  // longest sequence
  int64_t embed_dim = 128;
  int64_t heads = 4;
  int64_t layers = 4;
  float dropout = 0.0f;
  bool checkpoint_activations = false;  // each block recomputes its activations in backward
  MoeConfig moe;                        // experts > 0: every block's MLP is a mixture of experts
};

// 0, 1, ..., T-1 (int64) on `device`: the positions wpe embeds. On a device they are made once (per
// device, grown to the longest T asked) and sliced, so a step does not wait for a host copy.
Tensor position_ids(int64_t T, Device device);

// The positions of the T tokens of each sequence a rank holds: 0..T-1, or under context parallelism
// those of part `part` of `parts` (parallel/context/layout.h). ValueError, naming `who`, when they
// reach past `context` positions.
Tensor sequence_positions(int64_t T, Device device, int64_t context, int part, int parts,
                          parallel::context::ContextAttention attention, const char* who);

// The first layer of the chain: ids (B, T) int64 -> dropout(wte(ids) + wpe(0..T-1)) (B, T, C).
class GptEmbedding : public Module {
 public:
  GptEmbedding(std::shared_ptr<Embedding> wte, std::shared_ptr<Embedding> wpe, std::shared_ptr<Dropout> drop);
  Tensor forward(const Tensor& ids) override;
  std::string name() const override { return "GptEmbedding"; }
  // Context parallelism: the ids are part `part` of `parts` of each sequence, at the positions
  // parallel/context/layout.h gives them.
  int part = 0, parts = 1;
  parallel::context::ContextAttention attention = parallel::context::ContextAttention::Ring;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
};

// The last layer of the chain: (B, T, C) -> lm_head(ln_f(x)) (B, T, vocab).
class GptHead : public Module {
 public:
  GptHead(std::shared_ptr<LayerNorm> ln_f, std::shared_ptr<Linear> lm_head);
  Tensor forward(const Tensor& x) override { return lm_head->forward(ln_f->forward(x)); }
  std::string name() const override { return "GptHead"; }
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;
};

class CharTransformer : public Module {
 public:
  explicit CharTransformer(const CharTransformerConfig& config);
  // ids (B, T) int64 with T <= context -> logits (B, T, vocab)
  Tensor forward(const Tensor& ids) override;
  std::string name() const override { return "CharTransformer"; }
  // The model as a chain for pipeline parallelism: the embedding (prefix ""), block i ("h.i."), the
  // head (""). The layers share their parameters with this model.
  LayerChain layer_chain() const;
  // Context parallelism: from now on each rank of `group` feeds forward its part of every sequence
  // (the tokens parallel/context/layout.h gives it for `attention`) and gets the logits of those
  // tokens; attention runs over the group by ring or Ulysses. Every rank runs every forward together.
  void spread_sequence(dist::ProcessGroupPtr group, parallel::context::ContextAttention attention);
  // Samples `count` tokens after `prompt` ids: softmax(logits / temperature), optionally restricted to
  // the top_k most likely (0: all).
  std::vector<int64_t> generate(std::vector<int64_t> prompt, int64_t count, float temperature, int64_t top_k,
                                Generator& gen);
  CharTransformerConfig config;

 private:
  std::shared_ptr<GptEmbedding> embed_;
  std::vector<std::shared_ptr<TransformerBlock>> blocks_;
  std::shared_ptr<GptHead> head_;
};

// Autoregressive sampling, shared by every model that generates text: `count` times, feeds the last
// `context` ids to `logits_of` ((1, T) int64 -> (1, T, vocab)), samples the next id from
// softmax(last logits / temperature), kept to the top_k most likely when top_k > 0, and appends it.
// Runs `model` in eval mode without gradients, and restores its mode.
std::vector<int64_t> generate_tokens(Module& model, const std::function<Tensor(const Tensor&)>& logits_of,
                                     int64_t context, std::vector<int64_t> prompt, int64_t count, float temperature,
                                     int64_t top_k, Generator& gen);

}  // namespace tessera::nn
