// Models of a table's feature columns: logistic (softmax) regression over data.classes, and linear
// regression to one number (mean squared error; no accuracy).
#include "tessera/nn/layers.h"
#include "tessera/train/model_registry.h"

namespace tessera::train {

namespace {
ModelEntry one_linear_layer(const char* name, bool regression) {
  ModelEntry e;
  e.name = name;
  e.datasets = {"csv"};
  e.build = [regression](const TrainConfig& c, int64_t) -> std::shared_ptr<nn::Module> {
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(c.model.input_dim, regression ? 1 : c.data.classes)});
  };
  e.regression = regression;
  e.reports_accuracy = !regression;
  return e;
}
}  // namespace

ModelEntry logistic_model() { return one_linear_layer("logistic", false); }
ModelEntry linear_model() { return one_linear_layer("linear", true); }

}  // namespace tessera::train
