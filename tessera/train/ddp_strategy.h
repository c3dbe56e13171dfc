// DdpStrategy: synchronous data parallelism. Each rank holds a replica (parallel/ddp), reads its
// share of every global batch, and backward returns with the gradients averaged over the group, so
// the optimizer step is the single-process one. Evaluation is sharded over the ranks and summed.
// With parallel.ep > 1 the mixtures' experts are spread over the ranks instead of replicated
// (expert_parallelism.h): every rank then runs every forward (evaluation reads the whole set on each
// rank), and checkpoints gather the experts. With parallel.cp > 1 each sequence is cut over groups of
// that many ranks (context_parallelism.h).
#pragma once
#include "tessera/parallel/ddp/distributed_data_parallel.h"
#include "tessera/train/context_parallelism.h"
#include "tessera/train/expert_parallelism.h"
#include "tessera/train/local_strategy.h"

namespace tessera::train {

class DdpStrategy : public LocalStrategy {
 public:
  // Collective over `group` with parallel.cp > 1 (the context groups).
  DdpStrategy(const TrainConfig& config, dist::ProcessGroupPtr group);
  std::string name() const override { return "ddp"; }
  int rank() const override { return group_->rank(); }
  int world_size() const override { return group_->size(); }
  // With context parallelism a group of parallel.cp ranks is one replica: it reads one share.
  DataShare data_share() const override {
    return context_ ? DataShare{context_->replica(), context_->replicas()} : DataShare{rank(), world_size()};
  }
  DataShare eval_share() const override { return experts_ ? DataShare{0, 1} : data_share(); }

  // Checks every rank built the same model, then broadcasts rank 0's values.
  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override;
  int64_t max_over_job(int64_t value) override;
  void sum_over_job(EvalSums& sums) override;
  std::optional<EvalContribution> evaluate_batch(const data::Batch& batch) override;
  void add_step_metrics(nlohmann::json& record) const override;
  std::string describe() const override;

  // Expert parallelism: the experts' gradients, norm and state are spread over the ranks.
  double forward_backward(const data::Batch& batch) override;
  void clip_gradients(double max_norm) override;
  nn::StateDict model_state() override;
  void load_model_state(const nn::StateDict& state) override;
  nn::StateDict optimizer_state(const optim::Optimizer& optimizer) override;
  void load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) override;
  bool keeps_whole_model() const override { return !experts_; }
  bool holds_whole_state() const override { return !experts_; }

  const parallel::ddp::DistributedDataParallel& ddp() const { return *ddp_; }

 protected:
  Tensor training_forward(const Tensor& inputs) override { return ddp_->forward(inputs); }
  dist::ProcessGroup* objective_group() override { return group_.get(); }

 private:
  TrainConfig config_;
  dist::ProcessGroupPtr group_;
  std::unique_ptr<parallel::ddp::DistributedDataParallel> ddp_;
  std::unique_ptr<ExpertParallelism> experts_;  // parallel.ep > 1
  std::unique_ptr<ContextParallelism> context_;  // parallel.cp > 1
};

}  // namespace tessera::train
