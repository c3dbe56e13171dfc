// DdpStrategy: synchronous data parallelism. Each rank holds a replica (parallel/ddp), reads its
// share of every global batch, and backward returns with the gradients averaged over the group, so
// the optimizer step is the single-process one. Evaluation is sharded over the ranks and summed.
// Two strategies build on it: experts spread over the ranks (expert_parallel_strategy.h) and
// sequences cut over them (context_parallel_strategy.h).
#pragma once
#include <set>
#include <string>

#include "tessera/parallel/ddp/distributed_data_parallel.h"
#include "tessera/train/local_strategy.h"

namespace tessera::train {

class DdpStrategy : public LocalStrategy {
 public:
  // `values_from_caller`: the replicas' values come from the caller after prepare (a live job's
  // membership change), not from rank 0's broadcast.
  DdpStrategy(const TrainConfig& config, dist::ProcessGroupPtr group, bool values_from_caller = false);
  std::string name() const override { return "ddp"; }
  int rank() const override { return group_->rank(); }
  int world_size() const override { return group_->size(); }
  DataShare data_share() const override { return {rank(), world_size()}; }

  // Checks every rank built the same model, then broadcasts rank 0's values.
  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override;
  int64_t max_over_job(int64_t value) override;
  void sum_over_job(EvalSums& sums) override { sum_eval_over(*group_, sums); }
  void add_step_metrics(nlohmann::json& record) const override;

  const parallel::ddp::DistributedDataParallel& ddp() const { return *ddp_; }

 protected:
  Tensor training_forward(const Tensor& inputs) override { return ddp_->forward(inputs); }
  dist::ProcessGroup* objective_group() override { return group_.get(); }
  // prepare's replicas, but for `kept_out`: parameters each rank keeps its own (not broadcast from
  // rank 0, not all-reduced).
  std::vector<Tensor> prepare_replicas(std::shared_ptr<nn::Module> model, std::set<std::string> kept_out);
  const TrainConfig& config() const { return config_; }
  const dist::ProcessGroupPtr& group() const { return group_; }

 private:
  TrainConfig config_;
  dist::ProcessGroupPtr group_;
  bool values_from_caller_ = false;
  std::unique_ptr<parallel::ddp::DistributedDataParallel> ddp_;
};

}  // namespace tessera::train
