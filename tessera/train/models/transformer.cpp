// The character-level Transformer language model (nn/char_transformer.h) over the text dataset; the
// one model with tensor-parallel layers and activation checkpointing.
#include "tessera/nn/char_transformer.h"
#include "tessera/train/model_registry.h"

namespace tessera::train {

ModelEntry transformer_model() {
  ModelEntry e;
  e.name = "transformer";
  e.datasets = {"text"};
  e.build = [](const TrainConfig& c, int64_t vocab_size) -> std::shared_ptr<nn::Module> {
    nn::CharTransformerConfig t;
    t.vocab_size = vocab_size;
    t.context = c.model.context;
    t.embed_dim = c.model.embed_dim;
    t.heads = c.model.heads;
    t.layers = c.model.layers;
    t.dropout = static_cast<float>(c.model.dropout);
    t.checkpoint_activations = c.model.activation_checkpointing;
    t.moe = {c.model.experts, c.model.expert_top_k, c.model.capacity_factor, c.model.aux_loss_weight};
    return std::make_shared<nn::CharTransformer>(t);
  };
  e.validate = [](const TrainConfig& c) {
    TESSERA_CHECK(c.model.embed_dim % c.model.heads == 0, "[config] model.embed_dim ", c.model.embed_dim,
                  " must be divisible by model.heads ", c.model.heads);
  };
  e.reports_accuracy = false;  // a language model: its loss (and perplexity)
  e.tensor_parallel = true;
  e.activation_checkpointing = true;
  return e;
}

}  // namespace tessera::train
