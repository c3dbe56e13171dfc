// LocalSgdStrategy: local SGD and DiLoCo (Douillard et al. 2023) for slow links, chosen by
// distributed.local_sgd = H > 0. Each rank trains its own replica on its share of every global batch
// with the config's optimizer (the inner one) and no communication for H steps; then the replicas
// meet: the average of their moves since the last meeting is one outer step of SGD with Nesterov
// momentum (distributed.outer_lr, distributed.outer_momentum) on the parameters they last shared,
//   Δ = θ − mean_r θ_r,   v = μ v + Δ,   θ -= lr_out (Δ + μ v),   and every θ_r = θ,
// one all-reduce of the parameters every H steps instead of the gradients' every step: H times fewer
// bytes. outer_lr 1 with outer_momentum 0 is plain local SGD (parameters averaged every H steps); with
// H = 1 and plain SGD inside, that is DDP's step. The replicas also meet before every evaluation and
// checkpoint (both then see the shared parameters), so a run with the same schedule meets at the same
// steps. Clipping and the inner optimizer's state stay each replica's own.
#pragma once
#include "tessera/train/local_strategy.h"

namespace tessera::train {

class LocalSgdStrategy : public LocalStrategy {
 public:
  LocalSgdStrategy(const TrainConfig& config, dist::ProcessGroupPtr group);
  std::string name() const override { return "local_sgd"; }
  int rank() const override { return group_->rank(); }
  int world_size() const override { return group_->size(); }
  DataShare data_share() const override { return {rank(), world_size()}; }

  // Every replica starts from rank 0's parameters.
  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override;
  // The inner step, and every H-th step the outer one. Collective then.
  void optimizer_step(optim::Optimizer& optimizer) override;
  int64_t max_over_job(int64_t value) override { return train::max_over_job(*group_, value); }
  void before_evaluation() override { meet(); }
  void sum_over_job(EvalSums& sums) override { sum_eval_over(*group_, sums); }
  // The shared parameters (the replicas meet first). Collective.
  nn::StateDict model_state() override;
  // Rank 0's inner optimizer state, and the outer momentum as "<index>.outer_momentum".
  nn::StateDict optimizer_state(const optim::Optimizer& optimizer) override;
  void load_model_state(const nn::StateDict& state) override;
  void load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) override;
  bool holds_whole_state() const override { return false; }  // the replicas differ between meetings
  void add_step_metrics(nlohmann::json& record) const override;
  std::string describe() const override;

  int64_t meetings() const { return meetings_; }

 protected:
  dist::ProcessGroup* objective_group() override { return group_.get(); }

 private:
  // The outer step, where a replica has moved since the last one. Collective.
  void meet();

  TrainConfig config_;
  dist::ProcessGroupPtr group_;
  std::vector<Tensor> params_, shared_, momentum_;  // the replica's, the last shared ones, the outer momentum
  Tensor flat_;                                     // the all-reduce's buffer: every parameter's Δ
  int64_t inner_steps_ = 0;                         // since the last meeting
  int64_t meetings_ = 0, bytes_ = 0;
};

}  // namespace tessera::train
