#include "tessera/train/expert_parallel_strategy.h"

namespace tessera::train {

ExpertParallelStrategy::ExpertParallelStrategy(const TrainConfig& config, dist::ProcessGroupPtr group)
    : DdpStrategy(config, group), experts_(group, static_cast<int>(config.parallel.ep)) {}

std::vector<Tensor> ExpertParallelStrategy::prepare(std::shared_ptr<nn::Module> model) {
  std::set<std::string> experts = experts_.place(*model);
  return prepare_replicas(std::move(model), std::move(experts));
}

double ExpertParallelStrategy::forward_backward(const data::Batch& batch) {
  const double loss = DdpStrategy::forward_backward(batch);
  experts_.reduce_gradients();
  return loss;
}

void ExpertParallelStrategy::clip_gradients(double max_norm) { experts_.clip_gradients(model_->parameters(), max_norm); }

nn::StateDict ExpertParallelStrategy::model_state() {
  nn::StateDict whole = experts_.gather(model_->state_dict());  // collective: every rank gathers
  return rank() == 0 ? whole : nn::StateDict{};
}

void ExpertParallelStrategy::load_model_state(const nn::StateDict& state) {
  model_->load_state_dict(experts_.cut(state), true);
}

nn::StateDict ExpertParallelStrategy::optimizer_state(const optim::Optimizer& optimizer) {
  nn::StateDict whole = experts_.gather_optimizer(optimizer.state_dict());
  return rank() == 0 ? whole : nn::StateDict{};
}

void ExpertParallelStrategy::load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
  optimizer.load_state_dict(experts_.cut_optimizer(state));
}

}  // namespace tessera::train
