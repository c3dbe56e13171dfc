// LocalStrategy: one process holds the whole model and reads every batch whole. The base of
// DdpStrategy, which adds the replicas' communication.
#pragma once
#include "tessera/nn/mixture_of_experts.h"
#include "tessera/train/strategy.h"

namespace tessera::train {

class LocalStrategy : public Strategy {
 public:
  std::string name() const override { return "local"; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  DataShare data_share() const override { return {0, 1}; }

  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override;
  void set_training(bool training) override { model_->train(training); }
  double forward_backward(const data::Batch& batch) override;
  void clip_gradients(double max_norm) override;
  bool unscale_gradients(double inv_scale) override;
  int64_t max_over_job(int64_t value) override { return value; }
  std::optional<EvalContribution> evaluate_batch(const data::Batch& batch) override;
  void sum_over_job(EvalSums&) override {}
  nn::StateDict model_state() override { return model_->state_dict(); }
  void load_model_state(const nn::StateDict& state) override { model_->load_state_dict(state, true); }
  bool holds_whole_state() const override { return true; }
  // The peak of live tensor bytes; a mixture of experts' routing (nn/mixture_of_experts.h): load,
  // dropped choices, the balancing loss.
  void add_step_metrics(nlohmann::json& record) const override;
  bool supports_objectives() const override { return true; }

 protected:
  // The model's output in training mode (DDP's forward hooks its reducer in).
  virtual Tensor training_forward(const Tensor& inputs) { return (*model_)(inputs); }
  // The model's output in evaluation (ZeRO-3 gathers its units around it).
  virtual Tensor evaluation_forward(const Tensor& inputs) { return (*model_)(inputs); }
  // The group an objective's loss draws its negatives from (the replicas').
  virtual dist::ProcessGroup* objective_group() { return nullptr; }
  Tensor training_loss(const Tensor& output, const Tensor& targets) {
    return objective_.loss ? objective_.loss(output, targets, objective_group()) : default_loss(output, targets);
  }
  std::shared_ptr<nn::Module> model_;

 private:
  // The model's mixtures of experts, found once (its structure is fixed after prepare): a step
  // takes their balancing losses, the metrics read their routing.
  const nn::NamedMixtures& mixtures() const;
  mutable std::optional<nn::NamedMixtures> mixtures_;
};

// The largest of every rank's `value` in `group`.
int64_t max_over_job(dist::ProcessGroup& group, int64_t value);
// Adds `sums` over `group` (counts as int64, the loss as float32: 7 digits are plenty for a report).
void sum_eval_over(dist::ProcessGroup& group, EvalSums& sums);
// Puts this process's most live tensor bytes so far into a step record as "peak_allocated_bytes"
// (what context and sequence parallelism, ZeRO and pipelines save), and returns them.
int64_t record_peak_allocated_bytes(nlohmann::json& record);

}  // namespace tessera::train
