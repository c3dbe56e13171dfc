#include "tessera/nn/models.h"

namespace tessera::nn {

std::shared_ptr<Sequential> make_mlp(const std::vector<int64_t>& sizes) {
  TESSERA_CHECK(sizes.size() >= 2, "[make_mlp] needs at least input and output sizes");
  auto m = std::make_shared<Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    m->push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size()) m->push_back(std::make_shared<ReLU>());
  }
  return m;
}

std::shared_ptr<Sequential> make_cnn(int64_t classes) {
  return std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Conv2d>(1, 32, 3, Conv2dConfig{1, 1}), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(32, 64, 3, Conv2dConfig{1, 1}), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Flatten>(), std::make_shared<Linear>(3136, 128), std::make_shared<ReLU>(),
      std::make_shared<Linear>(128, classes)});
}

}  // namespace tessera::nn
