// ZeroStrategy: sharded data parallelism (parallel/zero). Replicas read their shares of the batch as
// with DDP; the optimizer state (stage 1), the gradients (2) and the parameters (3) are cut into one
// piece per rank, or, hybrid-sharded ("hsdp"), into one piece per rank of a host, the hosts' copies
// kept equal by an all-reduce of the gradient pieces between them. Checkpoints hold the whole model and optimizer state as one process's (gathered
// at save, cut again at load), so a run resumes at any world size, stage or strategy.
#pragma once
#include "tessera/parallel/zero/hybrid_groups.h"
#include "tessera/parallel/zero/shard_buddies.h"
#include "tessera/parallel/zero/zero_data_parallel.h"
#include "tessera/train/local_strategy.h"

namespace tessera::train {

class ZeroStrategy : public LocalStrategy {
 public:
  // `group` is the job; with `hybrid` (distributed.strategy = "hsdp") ZeRO shards inside
  // hybrid.shard and keeps the replicas equal across hybrid.replicas.
  // `values_from_caller`: the caller loads the state after prepare (a live membership change), so
  // prepare does not broadcast rank 0's.
  ZeroStrategy(const TrainConfig& config, dist::ProcessGroupPtr group, parallel::zero::HybridGroups hybrid = {},
               bool values_from_caller = false);
  std::string name() const override { return hybrid_.replicas ? "hsdp" : "zero"; }
  int rank() const override { return group_->rank(); }
  int world_size() const override { return group_->size(); }
  DataShare data_share() const override { return {rank(), world_size()}; }

  // Wraps the model; returns this rank's pieces of the parameters.
  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override;
  void clip_gradients(double max_norm) override { zero_->clip_grad_norm(max_norm); }
  bool unscale_gradients(double inv_scale) override;
  void optimizer_step(optim::Optimizer& optimizer) override;
  int64_t max_over_job(int64_t value) override { return train::max_over_job(*group_, value); }
  // Stage 3 evaluates with the whole model gathered: the ranks may read different numbers of
  // evaluation batches, and a forward must then issue no collectives.
  void before_evaluation() override { zero_->hold_gathered(true); }
  void set_training(bool training) override;
  void sum_over_job(EvalSums& sums) override { sum_eval_over(*group_, sums); }
  nn::StateDict model_state() override;
  void load_model_state(const nn::StateDict& state) override { zero_->load_full_state_dict(state); }
  nn::StateDict optimizer_state(const optim::Optimizer& optimizer) override;
  void load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) override;
  // Stage 3 keeps only pieces of the parameters between steps.
  bool keeps_whole_model() const override { return config_.distributed.zero_stage < 3; }
  bool holds_whole_state() const override { return false; }
  // Live membership carries stages 1 and 2 (every rank keeps the whole parameters; a neighbour
  // keeps each rank's optimizer pieces: shard_buddies.h), not stage 3 nor hybrid sharding.
  bool shards_live_state() const override { return !hybrid_.replicas && config_.distributed.zero_stage < 3; }
  void commit_step(const optim::Optimizer& optimizer, int64_t step) override;
  const parallel::zero::ShardBuddies* shard_buddies() const override { return buddies_.get(); }
  // Sharded: each rank its elements of every parameter and optimizer buffer (parallel/zero/sharded_checkpoint.h).
  std::vector<io::SavePiece> checkpoint_pieces(const optim::Optimizer& optimizer) override;
  bool every_rank_writes_pieces() const override { return true; }
  std::vector<std::string> checkpoint_order() const override;
  void load_pieces(io::PieceReader& reader, optim::Optimizer& optimizer) override;
  void add_step_metrics(nlohmann::json& record) const override;
  std::string describe() const override;

  const parallel::zero::ZeroDataParallel& zero() const { return *zero_; }

 protected:
  Tensor training_forward(const Tensor& inputs) override { return zero_->forward(inputs); }
  Tensor evaluation_forward(const Tensor& inputs) override { return zero_->forward(inputs); }
  dist::ProcessGroup* objective_group() override { return group_.get(); }

 private:
  void attach_once(optim::Optimizer& optimizer);
  TrainConfig config_;
  dist::ProcessGroupPtr group_;
  parallel::zero::HybridGroups hybrid_;
  bool values_from_caller_ = false;
  std::unique_ptr<parallel::zero::ZeroDataParallel> zero_;
  const optim::Optimizer* attached_ = nullptr;
  std::unique_ptr<parallel::zero::ShardBuddies> buddies_;  // under live membership, from its first commit
};

}  // namespace tessera::train
