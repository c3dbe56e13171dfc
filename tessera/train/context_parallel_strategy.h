// ContextParallelStrategy (parallel.cp = N): DDP over the world whose replicas are groups of N ranks,
// each rank of a group holding T/N tokens of every sequence the group reads (context_parallelism.h
// holds the groups and the cut; parallel/context the attention across it).
#pragma once
#include "tessera/train/context_parallelism.h"
#include "tessera/train/ddp_strategy.h"

namespace tessera::train {

class ContextParallelStrategy : public DdpStrategy {
 public:
  // Collective over `group`: the context groups are made here, before the trainer reads the shares.
  ContextParallelStrategy(const TrainConfig& config, dist::ProcessGroupPtr group);
  // A group is one replica: it reads one share of each batch.
  DataShare data_share() const override { return {context_.replica(), context_.replicas()}; }
  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override;
  // This rank's tokens of the batch; the loss reported is the group's (the whole sequences').
  double forward_backward(const data::Batch& batch) override;
  std::optional<EvalContribution> evaluate_batch(const data::Batch& batch) override;
  void sum_over_job(EvalSums& sums) override;
  std::string describe() const override { return "[ddp] " + context_.describe(); }

 private:
  ContextParallelism context_;
};

}  // namespace tessera::train
