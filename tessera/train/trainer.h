// One training run, readable top to bottom: build the data, the model, the optimizer and the
// schedule from a TrainConfig; then per step: batch -> forward -> loss -> backward -> (clip) -> step
// -> schedule; evaluate each epoch; checkpoint on schedule, at each epoch's end and when stopped.
// Everything a resumed run needs is in the checkpoint, so interrupted-and-resumed training ends with
// parameters bitwise equal to an uninterrupted run.
#pragma once
#include <atomic>
#include <memory>
#include <optional>

#include "tessera/data/char_dataset.h"
#include "tessera/data/data_loader.h"
#include "tessera/nn/module.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/optimizer.h"
#include "tessera/train/config.h"
#include "tessera/train/progress.h"

namespace tessera::train {

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // classification only (NaN for the language model)
  int64_t samples = 0;
};

struct FitResult {
  int64_t steps = 0;
  bool stopped_early = false;  // max_steps reached or a stop was requested
  std::optional<EvalResult> last_eval;
  std::string last_checkpoint;
};

// Builds the model a config describes; vocab_size is used by the text model only.
std::shared_ptr<nn::Module> build_model(const TrainConfig& config, int64_t vocab_size);

class Trainer {
 public:
  explicit Trainer(TrainConfig config);
  ~Trainer();
  // Loads model, optimizer, schedule, data position and RNG state. `path` as io::load_checkpoint
  // takes it; "" means the latest checkpoint of this run's output_dir (an IoError if there is none).
  void resume(const std::string& path = "");
  FitResult fit();
  EvalResult evaluate();
  // Saves a checkpoint of the current state now; returns its directory.
  std::string save_checkpoint();
  // Set from a signal handler: the run stops after the current step, with a checkpoint.
  static void request_stop();

  nn::Module& model() { return *model_; }
  const TrainConfig& config() const { return config_; }
  int64_t global_step() const { return step_; }
  const data::Vocabulary* vocabulary() const { return vocab_.get(); }

 private:
  void build_data();
  Tensor loss_of(const data::Batch& batch, Tensor* logits_out);

  TrainConfig config_;
  std::shared_ptr<data::Dataset> train_set_, eval_set_;
  std::shared_ptr<data::Vocabulary> vocab_;
  std::unique_ptr<data::DataLoader> loader_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<optim::LRScheduler> schedule_;
  int64_t step_ = 0, epoch_ = 0, batch_in_epoch_ = 0;
  static std::atomic<bool> stop_requested_;
};

}  // namespace tessera::train
