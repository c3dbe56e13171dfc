// Bag of words: an EmbeddingBag over the int64 word ids, then a Linear classifier. A Sequential, so
// DDP, checkpoints and evaluation need nothing new; the parameter servers update its embedding rows
// sparsely.
#include "tessera/nn/embedding_bag.h"
#include "tessera/nn/layers.h"
#include "tessera/train/model_registry.h"

namespace tessera::train {

ModelEntry bow_model() {
  ModelEntry e;
  e.name = "bow";
  e.datasets = {"bag-of-words"};
  e.build = [](const TrainConfig& c, int64_t) -> std::shared_ptr<nn::Module> {
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::EmbeddingBag>(c.data.vocab_size, c.model.embed_dim),
        std::make_shared<nn::Linear>(c.model.embed_dim, c.data.classes)});
  };
  e.reads_word_ids = true;
  return e;
}

}  // namespace tessera::train
