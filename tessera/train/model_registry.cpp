#include "tessera/train/model_registry.h"

#include "tessera/core/error.h"

namespace tessera::train {

// One line per model: its entry, defined in train/models/<name>.cpp.
ModelEntry mlp_model();
ModelEntry cnn_model();
ModelEntry transformer_model();
ModelEntry bow_model();
ModelEntry logistic_model();
ModelEntry linear_model();
ModelEntry milnce_model();

namespace {
const std::vector<ModelEntry>& entries() {
  static const std::vector<ModelEntry> all{mlp_model(),    cnn_model(),    transformer_model(), bow_model(),
                                           logistic_model(), linear_model(), milnce_model()};
  return all;
}
}  // namespace

const ModelEntry& model_entry(const std::string& name) {
  for (const ModelEntry& e : entries())
    if (e.name == name) return e;
  std::string list;
  for (const ModelEntry& e : entries()) list += (list.empty() ? "" : ", ") + e.name;
  throw ValueError("[config] model.name = '" + name + "' is not one of: " + list);
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelEntry& e : entries()) names.push_back(e.name);
  return names;
}

}  // namespace tessera::train
