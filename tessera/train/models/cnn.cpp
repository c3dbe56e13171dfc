// The CNN of nn/models.h: 1x28x28 images into 10 classes.
#include "tessera/nn/models.h"
#include "tessera/train/model_registry.h"

namespace tessera::train {

ModelEntry cnn_model() {
  ModelEntry e;
  e.name = "cnn";
  e.datasets = {"fashion-mnist", "synthetic", "image-folder"};
  e.build = [](const TrainConfig&, int64_t) -> std::shared_ptr<nn::Module> { return nn::make_cnn(10); };
  e.image_shape = Shape{1, 28, 28};
  e.fixed_classes = 10;
  return e;
}

}  // namespace tessera::train
