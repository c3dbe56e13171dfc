// PipelineStage: one stage of a synchronous pipeline (GPipe or 1F1B, schedule.h), the unit a rank of
// a pipeline-parallel job runs.
//
// A training step splits the batch into M equal micro-batches along dim 0 and runs the schedule's
// actions. Forward of micro-batch m: stage 0 takes it from the batch, a later stage receives its
// predecessor's activation (p2p.h); the stage's layers run; the last stage computes the loss against
// its slice of the targets, the others send their output on. Backward of m: the last stage runs
// backward from loss_m / M, the others from the token of their send, which waits for the next
// stage's gradient. Gradients therefore accumulate over the micro-batches into exactly the
// gradient of the whole batch's mean loss, and the caller steps each stage's own optimizer.
//
// Only the first stage reads `inputs` and only the last reads `targets`; the others may pass
// undefined tensors (every rank of a data-parallel replica reading the same batch is simplest).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/pipeline/p2p.h"
#include "tessera/parallel/pipeline/schedule.h"

namespace tessera::parallel::pipeline {

struct PipelineOptions {
  ScheduleKind schedule = ScheduleKind::OneForwardOneBackward;
  int64_t microbatches = 4;
  // The type activations and their gradients travel in between stages: float32, or bfloat16 under
  // bf16 mixed precision (half the bytes; the receiver computes on them as float32 again). Every
  // stage of a pipeline must agree.
  DType wire = DType::Float32;
};

// The last stage's output and the micro-batch's targets -> the micro-batch's mean loss.
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& targets)>;

struct StepStats {
  double loss = 0.0;              // mean over the micro-batches, on every stage
  double wall_seconds = 0.0;      // the step on this stage
  double compute_seconds = 0.0;   // wall time not spent waiting for other stages
  int64_t peak_activations = 0;   // micro-batches whose activations were held at once
  int64_t bytes_sent = 0, bytes_received = 0;
  // The fraction of the step this stage sat idle (waiting to receive or to send).
  double bubble_fraction() const { return wall_seconds > 0 ? 1.0 - compute_seconds / wall_seconds : 0.0; }
};

class PipelineStage {
 public:
  // `layers`: this stage's run of the model's chain; `group`: the pipeline, stage s = rank s.
  PipelineStage(nn::LayerChain layers, dist::ProcessGroupPtr group, PipelineOptions options, LossFn loss);

  StepStats train_step(const Tensor& inputs, const Tensor& targets);
  // fp16 loss scaling (optim/grad_scaler.h): the last stage back-propagates loss × scale; the
  // reported loss stays unscaled.
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  // Forward only, without gradients and micro-batches (evaluation): the model's output on the last
  // stage, an undefined tensor on the others.
  Tensor forward(const Tensor& inputs);

  int stage() const { return group_->rank(); }
  int stages() const { return group_->size(); }
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == stages() - 1; }
  const nn::LayerChain& layers() const { return layers_; }
  const PipelineOptions& options() const { return options_; }
  StageLink& link() { return link_; }

  // This stage's parameters and buffers under the whole model's names (prefix + name).
  nn::StateDict state_dict() const;
  std::vector<Tensor> parameters() const;
  void train(bool on = true);

 private:
  Tensor run_layers(const Tensor& x);
  void run_forward(int64_t m, const Tensor& inputs, const Tensor& targets, int64_t rows);
  void run_backward(int64_t m);

  nn::LayerChain layers_;
  dist::ProcessGroupPtr group_;
  PipelineOptions options_;
  LossFn loss_;
  double loss_scale_ = 1.0;
  StageLink link_;
  std::vector<Action> actions_;
  // Per micro-batch in flight: what its backward starts from, and the shape it sent.
  std::vector<Tensor> backward_roots_;
  // The received activations: autograd holds leaves weakly, and their gradients must reach the hook
  // that sends them back.
  std::vector<Tensor> received_;
  std::vector<Shape> sent_shapes_;
  double loss_sum_ = 0.0;
};

}  // namespace tessera::parallel::pipeline
