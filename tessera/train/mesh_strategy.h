// MeshStrategy: training on a DP × PP × TP mesh (parallel/device_mesh.h), for models too large for
// one worker. Chosen when parallel.pp · parallel.tp > 1, or by distributed.strategy = "mesh".
//
// Every rank builds the whole model from the same seed (so every layout starts from the parameters a
// single process would); prepare cuts it: tensor-parallel layers take their shard of each weight
// (parallel/tensor), then the chain of layers is cut into parallel.pp stages (parallel/pipeline)
// balanced by parameters or measured time, and each rank keeps only its stage's layers. A step:
//   batch (the replica's share; every rank of a replica reads the same batch)
//   -> pipeline step over parallel.microbatches micro-batches (GPipe or 1F1B)
//   -> gradients averaged over the data-parallel replicas (one flat all-reduce, the loss riding along)
//   -> (clipping by the global norm over all stages and shards) -> each rank's optimizer steps its
//   own parameters.
// With dropout 0 the losses and parameters equal single-process training on the whole batch (the
// tests check 1e-4 relative); dropout draws differ by layout.
// Context parallelism (parallel.cp = N) inside the mesh: each N consecutive data-parallel ranks form a
// context group that reads one batch and cuts every sequence over its ranks (context_parallelism.h);
// the whole model is spread over the group before it is cut, so every layer, tensor-parallel shard
// and pipeline stage attends across it. The data-parallel average over the groups' ranks is then the
// mean over every token, as under ContextParallel<DdpStrategy>.
// Checkpoints: the stages' leaders send their parameters, gathered from their tensor-parallel
// shards, to world rank 0, which writes the whole model under its single-process names, so
// `tessera eval` and `tessera generate` read it as any other checkpoint. The optimizer's state goes
// the same way and is written as one process's optimizer would hold it (parameter indices of the
// whole model), so --resume continues at the same layout bit for bit, and at any other layout (one
// process included) from the same state; a one-process checkpoint resumes on a mesh alike.
#pragma once
#include <functional>
#include <map>

#include "tessera/parallel/device_mesh.h"
#include "tessera/parallel/pipeline/pipeline_stage.h"
#include "tessera/parallel/tensor/sequence_parallel.h"
#include "tessera/parallel/tensor/sharding.h"
#include "tessera/train/context_parallelism.h"
#include "tessera/train/strategy.h"

namespace tessera::train {

class MeshStrategy : public Strategy {
 public:
  // Collective over `world`; checks the layout (parallel.dp · pp · tp against the world size).
  MeshStrategy(const TrainConfig& config, dist::ProcessGroupPtr world, std::shared_ptr<data::Dataset> train_set);
  ~MeshStrategy() override;
  std::string name() const override { return "mesh"; }
  int rank() const override { return world_->rank(); }
  int world_size() const override { return world_->size(); }
  // A context group (parallel.cp ranks of the data-parallel dimension) reads one share.
  DataShare data_share() const override {
    return context_ ? DataShare{context_->replica(), context_->replicas()}
                    : DataShare{mesh_->coordinates().dp, mesh_->shape().dp};
  }

  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override;
  bool keeps_whole_model() const override { return false; }  // its stage's shards only
  void set_training(bool training) override { stage_->train(training); }
  double forward_backward(const data::Batch& batch) override;
  void clip_gradients(double max_norm) override;
  bool unscale_gradients(double inv_scale) override;
  int64_t max_over_job(int64_t value) override;
  std::optional<EvalContribution> evaluate_batch(const data::Batch& batch) override;
  void sum_over_job(EvalSums& sums) override;
  nn::StateDict model_state() override;
  void load_model_state(const nn::StateDict& state) override;
  nn::StateDict optimizer_state(const optim::Optimizer& optimizer) override;
  void load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) override;
  // Sharded: replica 0's ranks write their stage's tensors, a tensor-parallel shard as the boxes it
  // holds, a replicated tensor from tensor-parallel rank 0; a load reads only those boxes.
  std::vector<io::SavePiece> checkpoint_pieces(const optim::Optimizer& optimizer) override;
  bool every_rank_writes_pieces() const override { return true; }
  std::vector<std::string> checkpoint_order() const override;
  void load_pieces(io::PieceReader& reader, optim::Optimizer& optimizer) override;
  void add_step_metrics(nlohmann::json& record) const override;
  std::string describe() const override;

  const parallel::DeviceMesh& mesh() const { return *mesh_; }
  const parallel::pipeline::PipelineStage& stage() const { return *stage_; }
  // Stage boundaries over the model's chain of layers (partition.h).
  const std::vector<int64_t>& stage_bounds() const { return bounds_; }
  const parallel::pipeline::StepStats& last_step() const { return last_step_; }

 private:
  // One entry per tensor of the whole model, in state_dict order.
  struct FullTensor {
    std::string name;
    Shape shape;
    DType dtype;
  };

  Tensor loss_of(const Tensor& output, const Tensor& targets) const;
  // The batch as this rank reads it: its part of every sequence under context parallelism.
  data::Batch tokens_of_this_rank(const data::Batch& batch) const;
  // A tensor of this rank under its whole-model name, as the boxes of the whole tensor it holds, each
  // with the part of `local` that holds it (one box for a whole tensor; a tensor-parallel shard has one
  // per block of its split dimension).
  std::vector<std::pair<io::Region, Tensor>> boxes_of(const std::string& whole_name, const Tensor& local) const;
  const FullTensor& full_tensor(const std::string& whole_name) const;
  double average_gradients_and_loss(double loss);
  nn::StateDict stage_full_state();  // collective over the tensor-parallel group
  // On world rank 0: `mine` followed by every other stage leader's named tensors; sent there by the
  // stage leaders (empty result). Only the leaders (dp 0, tp 0) call it.
  nn::StateDict gather_stage_leaders(nn::StateDict mine, int64_t tag_base, const std::string& what);

  TrainConfig config_;
  dist::ProcessGroupPtr world_;
  std::shared_ptr<data::Dataset> train_set_;
  std::unique_ptr<parallel::DeviceMesh> mesh_;
  std::optional<ContextParallelism> context_;  // parallel.cp > 1: groups of the data-parallel dimension
  std::vector<FullTensor> full_layout_;
  std::map<std::string, size_t> full_index_;  // name -> its entry in full_layout_
  std::vector<int64_t> bounds_;
  // Per parameter of this rank: whether it is a shard (tensor parallelism) or a whole tensor; a
  // whole tensor is replicated across the tensor-parallel ranks.
  std::vector<bool> sharded_;
  // Per parameter of this rank: its whole-model name; and each whole-model parameter's index in one
  // process's optimizer (the checkpoint's numbering of optimizer state).
  std::vector<std::string> local_names_;
  std::map<std::string, int64_t> global_index_;
  std::map<std::string, parallel::tensor::ShardSpec> shard_specs_;  // whole-model name -> how it is cut
  std::function<nn::StateDict(const nn::NamedLayer&)> gather_layer_;  // tensor-parallel layer -> whole tensors
  std::function<Tensor(const Tensor&, const Tensor&)> tp_loss_;      // vocabulary-parallel cross-entropy
  // Sequence parallelism: this stage's parameters with partial gradients (summed over the
  // tensor-parallel group after each backward).
  std::vector<Tensor> token_parameters_;
  parallel::tensor::TensorParallelCommTally tp_comm_;  // what the last step spent on tensor-parallel collectives
  std::unique_ptr<parallel::pipeline::PipelineStage> stage_;
  parallel::pipeline::StepStats last_step_;
  Tensor grad_flat_;  // average_gradients_and_loss's all-reduce buffer
};

}  // namespace tessera::train
