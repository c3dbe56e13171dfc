// PipelineStage: one stage of a synchronous pipeline (GPipe, 1F1B, interleaved 1F1B, ZB-H1 or ZB-V,
// schedule.h), the unit a rank of a pipeline-parallel job runs.
//
// A training step splits the batch into M equal micro-batches along dim 0 and runs the schedule's
// actions. Forward of micro-batch m: stage 0 takes it from the batch, a later stage receives its
// predecessor's activation (p2p.h); the stage's layers run; the stage holding the model's last
// layers (the output stage) computes the loss against its slice of the targets, the others send
// their output on. Backward of m: the output stage runs backward from loss_m / M, the others from
// the token of their send, which waits for the next stage's gradient. Gradients therefore accumulate over the micro-batches into exactly the
// gradient of the whole batch's mean loss, and the caller steps each stage's own optimizer.
//
// Interleaved, stage s holds v chunks of the model, virtual stages s, P+s, 2P+s, ...: a micro-batch
// goes from stage P-1's chunk c to stage 0's chunk c+1, and messages are keyed by the receiving
// chunk and the micro-batch. Under ZB-V stage s holds chunks s and 2P-1-s: a micro-batch goes down
// the stages and back up, the output stage is stage 0, and on stage P-1 chunk 0's output becomes
// chunk 1's input in place (a leaf of it, whose gradient chunk 0's backward starts from), with no
// message. Under ZB-H1 and ZB-V a backward (B) defers the linear layers' weight gradients
// into the micro-batch's queue (autograd/weight_grad_deferral.h), which its W action runs; after
// each of its first steps the stages all-gather the passes they measured and plan their order again
// from them (schedule.h), which changes when passes run, never the gradients' bits.
//
// Only the first stage reads `inputs` and only the output stage reads `targets` (the last stage,
// or the first under ZB-V); the others may pass undefined tensors (every rank of a data-parallel
// replica reading the same batch is simplest).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/autograd/weight_grad_deferral.h"
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
  // ZB-H1 and ZB-V plan their order from measured passes (schedule.h). Ranks outside this pipeline whose layers
  // pair their collectives pass by pass with this stage's (its tensor-parallel partners) must run the
  // same order: with this group set, every rank of it plans from its first rank's pipeline's times.
  dist::ProcessGroupPtr same_order_as;
};

// The output stage's output and the micro-batch's targets -> the micro-batch's mean loss.
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& targets)>;

struct StepStats {
  double loss = 0.0;              // mean over the micro-batches, on every stage
  double wall_seconds = 0.0;      // the step on this stage
  double compute_seconds = 0.0;   // wall time not spent waiting for other stages
  // The compute of each kind of pass, summed over the step's micro-batches and chunks (waits left
  // out): backward is B under ZB-H1 and ZB-V and the whole backward otherwise; weight is their W.
  double forward_seconds = 0.0, backward_seconds = 0.0, weight_seconds = 0.0;
  int64_t peak_activations = 0;   // (chunk, micro-batch) pairs whose activations were held at once
  int64_t bytes_sent = 0, bytes_received = 0;
  // The fraction of the step this stage sat idle (waiting to receive or to send).
  double bubble_fraction() const { return wall_seconds > 0 ? 1.0 - compute_seconds / wall_seconds : 0.0; }
};

class PipelineStage {
 public:
  // `layers`: this stage's run of the model's chain; `group`: the pipeline, stage s = rank s.
  PipelineStage(nn::LayerChain layers, dist::ProcessGroupPtr group, PipelineOptions options, LossFn loss);
  // Interleaved and ZB-V: `chunks[c]` is virtual stage virtual_stage(chunk_order(schedule), s, P, c) of
  // the model cut into P·v runs (v = chunks.size(); stage_chunks() cuts them so).
  PipelineStage(std::vector<nn::LayerChain> chunks, dist::ProcessGroupPtr group, PipelineOptions options, LossFn loss);

  StepStats train_step(const Tensor& inputs, const Tensor& targets);
  // ZB-H1 and ZB-V plan their order again after each of their first kPlanningSteps steps: the first pays for
  // warm-up (allocations, kernels' first calls), the next ones measure the passes as they stay.
  static constexpr int kPlanningSteps = 3;
  // fp16 loss scaling (optim/grad_scaler.h): the output stage back-propagates loss × scale; the
  // reported loss stays unscaled.
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  // Forward only, without gradients and micro-batches (evaluation): the model's output on the output
  // stage, an undefined tensor on the others.
  Tensor forward(const Tensor& inputs);

  int stage() const { return group_->rank(); }
  int stages() const { return group_->size(); }
  // The stage that reads the inputs (stage 0), and the one with the model's last layers, the loss
  // and the output (the last stage; stage 0 under ZB-V).
  bool holds_input() const { return stage() == 0; }
  bool holds_output() const { return stage() == output_stage(options_.schedule, stages()); }
  int chunks() const { return static_cast<int>(chunks_.size()); }
  // Every layer this stage holds, chunk after chunk.
  const nn::LayerChain& layers() const { return layers_; }
  const PipelineOptions& options() const { return options_; }
  // The order this stage runs its passes in (make_schedule's; ZB-H1's and ZB-V's planned from measured
  // passes).
  const std::vector<Action>& schedule() const { return actions_; }
  // ZB-H1 and ZB-V: plans this stage's order from every stage's pass times (one entry per stage; every stage of
  // the pipeline must be given the same). train_step calls it with the measured ones; how many
  // plans were made so far.
  void plan_from(const std::vector<PassTimes>& times);
  int plans_made() const { return plans_; }
  StageLink& link() { return link_; }

  // This stage's parameters and buffers under the whole model's names (prefix + name).
  nn::StateDict state_dict() const;
  std::vector<Tensor> parameters() const;
  void train(bool on = true);

 private:
  Tensor run_chunk(int chunk, const Tensor& x);
  int virtual_stage_of(int chunk) const { return virtual_stage(chunk_order(options_.schedule), stage(), stages(), chunk); }
  bool is_first_virtual(int chunk) const { return virtual_stage_of(chunk) == 0; }
  bool is_last_virtual(int chunk) const { return virtual_stage_of(chunk) == stages() * chunks() - 1; }
  // Where this chunk's input comes from and its output goes to (gradients come back from there): the
  // next stage round the ring when looped, down the stages and back up in a V.
  ChunkPlace previous_place(int chunk) const { return place_of_virtual(virtual_stage_of(chunk) - 1); }
  ChunkPlace next_place(int chunk) const { return place_of_virtual(virtual_stage_of(chunk) + 1); }
  ChunkPlace place_of_virtual(int vs) const { return place_of(chunk_order(options_.schedule), vs, stages(), chunks()); }
  // The timeline's name of a pass ("forward micro-batch 3 chunk 1"); empty when not tracing.
  std::string span_name(const char* pass, int chunk, int64_t m) const;
  // Per (chunk, micro-batch) state lives at chunk·M + m; messages into a chunk use the same key.
  size_t slot(int chunk, int64_t m) const { return static_cast<size_t>(chunk * options_.microbatches + m); }
  void run_forward(int chunk, int64_t m, const Tensor& inputs, const Tensor& targets, int64_t rows);
  void run_backward(int chunk, int64_t m);
  void run_weight(int chunk, int64_t m);
  // ZB-H1 and ZB-V: the order planned again from the passes every stage measured in the step just run.
  void plan_from_measured_passes(const StepStats& stats);
  int steps_run_ = 0;  // ZB-H1's and ZB-V's steps, counted up to kPlanningSteps
  int plans_ = 0;

  std::vector<nn::LayerChain> chunks_;
  nn::LayerChain layers_;
  dist::ProcessGroupPtr group_;
  PipelineOptions options_;
  LossFn loss_;
  double loss_scale_ = 1.0;
  StageLink link_;
  std::vector<Action> actions_;
  // Per (chunk, micro-batch) in flight: what its backward starts from, and the shape it sent.
  std::vector<Tensor> backward_roots_;
  // The received activations: autograd holds leaves weakly, and their gradients must reach the hook
  // that sends them back.
  std::vector<Tensor> received_;
  std::vector<Shape> sent_shapes_;
  // ZB-V's turn on stage P-1, at the receiving chunk's slot: the leaf of chunk 0's output that chunk
  // 1 takes as its input, then, once chunk 1's backward ran, that leaf's gradient, which chunk 0's
  // backward starts from.
  std::vector<Tensor> handed_over_;
  // ZB-H1 and ZB-V: the weight gradients each B deferred, run by its W.
  std::vector<autograd::WeightGradQueue> weight_grads_;
  double loss_sum_ = 0.0;
};

}  // namespace tessera::parallel::pipeline
