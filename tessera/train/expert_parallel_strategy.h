// ExpertParallelStrategy (parallel.ep = N): DDP whose mixtures of experts are spread over groups of
// N ranks instead of replicated (expert_parallelism.h holds the groups and the gradient, norm and
// state rules). The experts differ by rank, so every rank runs every forward together: evaluation
// reads the whole set on each rank, and no rank holds the whole model (checkpoints gather it).
#pragma once
#include "tessera/train/ddp_strategy.h"
#include "tessera/train/expert_parallelism.h"

namespace tessera::train {

class ExpertParallelStrategy : public DdpStrategy {
 public:
  // Collective over `group`: the expert groups are made here, before the trainer reads the shares.
  ExpertParallelStrategy(const TrainConfig& config, dist::ProcessGroupPtr group);
  DataShare eval_share() const override { return {0, 1}; }
  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override;
  double forward_backward(const data::Batch& batch) override;
  void clip_gradients(double max_norm) override;
  void sum_over_job(EvalSums&) override {}  // every rank evaluated the whole set
  nn::StateDict model_state() override;
  void load_model_state(const nn::StateDict& state) override;
  nn::StateDict optimizer_state(const optim::Optimizer& optimizer) override;
  void load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) override;
  bool keeps_whole_model() const override { return false; }
  bool holds_whole_state() const override { return false; }
  std::string describe() const override { return "[ddp] " + experts_.describe(); }

 private:
  ExpertParallelism experts_;
};

}  // namespace tessera::train
