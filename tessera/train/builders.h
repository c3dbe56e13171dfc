// The pieces a training run is built from, shared by the data-parallel and parameter-server Trainer
// and the model-parallel trainer: the model, optimizer, schedule and datasets a TrainConfig describes.
#pragma once
#include <memory>

#include "tessera/data/char_dataset.h"
#include "tessera/data/dataset.h"
#include "tessera/nn/module.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/optimizer.h"
#include "tessera/train/config.h"

namespace tessera::train {

// Builds the model a config describes; vocab_size is used by the text model only.
std::shared_ptr<nn::Module> build_model(const TrainConfig& config, int64_t vocab_size);

// `lr` is optimizer.lr after optimizer.scale_lr.
std::unique_ptr<optim::Optimizer> build_optimizer(OptimizerConfig o, double lr, std::vector<Tensor> params);

// Linear warm-up, then the configured decay over `total_steps`.
std::shared_ptr<optim::LRScheduler> build_schedule(const ScheduleConfig& s, optim::Optimizer& opt, int64_t total_steps);

struct Datasets {
  std::shared_ptr<data::Dataset> train, eval;
  std::shared_ptr<data::Vocabulary> vocabulary;  // the text dataset only
};
Datasets load_datasets(const TrainConfig& config);

}  // namespace tessera::train
