// The MLP: Flatten, then Linear + ReLU (+ Dropout) per model.hidden width, then the classifier. It
// reads images (Fashion-MNIST, synthetic, an image folder) or a table's feature columns.
#include "tessera/nn/layers.h"
#include "tessera/train/model_registry.h"

namespace tessera::train {

ModelEntry mlp_model() {
  ModelEntry e;
  e.name = "mlp";
  e.datasets = {"fashion-mnist", "synthetic", "csv", "image-folder"};
  e.build = [](const TrainConfig& c, int64_t) -> std::shared_ptr<nn::Module> {
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Flatten>());
    int64_t in = c.model.input_dim;
    for (int64_t h : c.model.hidden) {
      model->push_back(std::make_shared<nn::Linear>(in, h));
      model->push_back(std::make_shared<nn::ReLU>());
      if (c.model.dropout > 0) model->push_back(std::make_shared<nn::Dropout>(static_cast<float>(c.model.dropout)));
      in = h;
    }
    // Fashion-MNIST has its 10 classes; the other datasets say theirs in data.classes.
    model->push_back(std::make_shared<nn::Linear>(in, c.data.dataset == "fashion-mnist" ? 10 : c.data.classes));
    return model;
  };
  return e;
}

}  // namespace tessera::train
