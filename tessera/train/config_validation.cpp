// validate(): a config's settings (config.cpp's check_settings), then what its model says of it
// (train/model_registry.h): the datasets it trains on, its own keys, and the layouts it takes.
#include <algorithm>
#include <string>

#include "tessera/core/error.h"
#include "tessera/train/config.h"
#include "tessera/train/model_registry.h"

namespace tessera::train {

namespace {

void check_model(const TrainConfig& c) {
  const ModelEntry& model = model_entry(c.model.name);
  if (std::find(model.datasets.begin(), model.datasets.end(), c.data.dataset) == model.datasets.end()) {
    std::string trains_on, trained_by;
    for (const std::string& d : model.datasets) trains_on += (trains_on.empty() ? "" : ", ") + d;
    for (const std::string& name : model_names()) {
      const auto& takes = model_entry(name).datasets;
      if (std::find(takes.begin(), takes.end(), c.data.dataset) != takes.end())
        trained_by += (trained_by.empty() ? "" : ", ") + name;
    }
    throw ValueError("[config] model.name = '" + c.model.name + "' does not fit data.dataset = '" + c.data.dataset +
                     "': " + c.model.name + " trains on " + trains_on + "; " + c.data.dataset + " trains " +
                     trained_by);
  }
  if (model.validate) model.validate(c);
  TESSERA_CHECK(!c.model.activation_checkpointing || (model.activation_checkpointing && !uses_model_parallelism(c)),
                "[config] model.activation_checkpointing applies to model.name = 'transformer' without parallel.pp / "
                "parallel.tp (got model.name = '", c.model.name, "')");
  TESSERA_CHECK(c.model.experts == 0 || c.model.name == "transformer", "[config] model.experts (a mixture of "
                "experts) applies to model.name = 'transformer', not '", c.model.name, "'");
  TESSERA_CHECK(c.parallel.tp == 1 || model.tensor_parallel, "[config] parallel.tp = ", c.parallel.tp,
                " needs model.name = 'transformer' (tensor-parallel layers exist for the Transformer only)");
}

}  // namespace

void validate(const TrainConfig& config) {
  check_settings(config);
  check_model(config);
}

}  // namespace tessera::train
