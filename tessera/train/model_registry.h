// The models a config can name (model.name), each one entry: how to build it, the datasets it trains
// on, its own checks of the config, its objective where it has one, and what it reports. The
// trainer, the builders and config validation ask the entry, never the name. A new model is one
// file in train/models/ (a function returning its entry) and one line in model_registry.cpp.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/shape.h"
#include "tessera/nn/module.h"
#include "tessera/train/config.h"
#include "tessera/train/objective.h"

namespace tessera::train {

struct ModelEntry {
  std::string name;
  // The data.dataset values it trains on.
  std::vector<std::string> datasets;
  // The whole model, as every rank builds it from the same seed (vocab_size: the text dataset's).
  std::function<std::shared_ptr<nn::Module>(const TrainConfig& config, int64_t vocab_size)> build;
  // Its checks of its own keys and of the layouts it trains in (ValueError naming the key); may be null.
  std::function<void(const TrainConfig& config)> validate;
  // Its objective in place of default_loss (MIL-NCE's); null: cross-entropy, or MSE for a regression.
  std::function<Objective(const TrainConfig& config)> objective;
  // Its output is one number per sample (csv targets are numbers then): no accuracy is reported.
  bool regression = false;
  // Whether evaluation reports an accuracy (a classifier's); the language model reports its loss.
  bool reports_accuracy = true;
  // Images of one shape only (the cnn's 1x28x28), and then its own number of classes; otherwise
  // model.input_dim values and data.classes.
  std::optional<Shape> image_shape;
  int64_t fixed_classes = 0;
  // It reads bags of int64 word ids below data.vocab_size (data.bag_length per sample), not floats.
  bool reads_word_ids = false;
  // Tensor-parallel layers exist for it (parallel.tp > 1), and model.activation_checkpointing.
  bool tensor_parallel = false;
  bool activation_checkpointing = false;
};

// The entry of `name`; ValueError listing the names there are.
const ModelEntry& model_entry(const std::string& name);
std::vector<std::string> model_names();

}  // namespace tessera::train
