// ModelParallelTrainer: training on a DP × PP × TP mesh (parallel/device_mesh.h), for models too
// large for one worker. Chosen by `tessera train` when parallel.pp · parallel.tp > 1.
//
// Every rank builds the whole model from the same seed (so every layout starts from the parameters a
// single process would), cuts it: tensor-parallel layers take their shard of each weight
// (parallel/tensor), then the chain of layers is cut into parallel.pp stages (parallel/pipeline)
// balanced by parameters or measured time, and each rank keeps only its stage's layers. A step:
//   batch (the replica's DistributedSampler share; every rank of a replica reads the same batch)
//   -> pipeline step over parallel.microbatches micro-batches (GPipe or 1F1B)
//   -> gradients averaged over the data-parallel replicas (one flat all-reduce, the loss riding along)
//   -> (gradient clipping by the global norm over all stages and shards) -> each rank's optimizer
//   steps its own parameters -> schedule.
// With dropout 0 the losses and parameters equal single-process training on the whole batch (the
// tests check 1e-4 relative); dropout draws differ by layout.
// Checkpoints: the stages' leaders send their parameters, gathered from their tensor-parallel
// shards, to world rank 0, which writes the whole model under its single-process names, so
// `tessera eval` and `tessera generate` read it as any other checkpoint.
#pragma once
#include <memory>
#include <optional>

#include "tessera/data/data_loader.h"
#include "tessera/parallel/device_mesh.h"
#include "tessera/parallel/pipeline/pipeline_stage.h"
#include "tessera/train/builders.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

class ModelParallelTrainer {
 public:
  // Collective over `world`.
  ModelParallelTrainer(TrainConfig config, dist::ProcessGroupPtr world);
  ~ModelParallelTrainer();

  FitResult fit();
  // One optimizer step on one batch (this replica's share; `inputs` read by the first stage, `targets`
  // by the last): pipeline step, data-parallel average, clipping, optimizer, schedule position.
  // Returns the step's loss averaged over the replicas; last_step() holds the pipeline's figures.
  double train_step(const Tensor& inputs, const Tensor& targets);
  EvalResult evaluate();  // collective
  // Collective: the whole model's parameters and buffers under their single-process names, on world
  // rank 0 (empty elsewhere).
  nn::StateDict full_state_dict();
  // Collective; returns the checkpoint directory on rank 0, "" elsewhere.
  std::string save_checkpoint();

  int rank() const { return world_->rank(); }
  const parallel::DeviceMesh& mesh() const { return *mesh_; }
  const parallel::pipeline::PipelineStage& stage() const { return *stage_; }
  // Stage boundaries over the model's chain of layers (partition.h).
  const std::vector<int64_t>& stage_bounds() const { return bounds_; }
  const parallel::pipeline::StepStats& last_step() const { return last_step_; }
  int64_t global_step() const { return step_; }
  const data::Vocabulary* vocabulary() const { return vocab_.get(); }

 private:
  // One entry per tensor of the whole model, in state_dict order, with the chain layer it belongs to.
  struct FullTensor {
    std::string name;
    Shape shape;
    DType dtype;
    int64_t layer;
  };

  void build_model_and_stage();
  Tensor loss_of(const Tensor& output, const Tensor& targets) const;
  double average_gradients_and_loss(double loss);
  void clip_gradients(double max_norm);
  nn::StateDict stage_full_state();  // collective over the tensor-parallel group

  TrainConfig config_;
  dist::ProcessGroupPtr world_;
  std::unique_ptr<parallel::DeviceMesh> mesh_;
  Datasets data_;
  std::shared_ptr<data::Vocabulary> vocab_;
  std::unique_ptr<data::DataLoader> loader_;
  std::vector<FullTensor> full_layout_;
  std::vector<int64_t> bounds_;
  // Per parameter of this rank: whether it is a shard (tensor parallelism) or a whole tensor; a
  // whole tensor is replicated across the tensor-parallel ranks.
  std::vector<bool> sharded_;
  std::function<nn::StateDict(const nn::NamedLayer&)> gather_layer_;  // tensor-parallel layer -> whole tensors
  std::function<Tensor(const Tensor&, const Tensor&)> tp_loss_;      // vocabulary-parallel cross-entropy
  std::unique_ptr<parallel::pipeline::PipelineStage> stage_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<optim::LRScheduler> schedule_;
  parallel::pipeline::StepStats last_step_;
  Tensor grad_flat_;  // average_gradients_and_loss's all-reduce buffer
  int64_t step_ = 0, epoch_ = 0, batch_in_epoch_ = 0;
};

}  // namespace tessera::train
