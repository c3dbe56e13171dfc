#include "tessera/train/context_parallel_strategy.h"

namespace tessera::train {

ContextParallelStrategy::ContextParallelStrategy(const TrainConfig& config, dist::ProcessGroupPtr group)
    : DdpStrategy(config, group),
      context_(group, static_cast<int>(config.parallel.cp), parallel::context::context_attention(config.parallel.cp_attention)) {}

std::vector<Tensor> ContextParallelStrategy::prepare(std::shared_ptr<nn::Module> model) {
  context_.spread(*model);
  return DdpStrategy::prepare(std::move(model));
}

double ContextParallelStrategy::forward_backward(const data::Batch& batch) {
  return context_.mean_over_group(DdpStrategy::forward_backward(context_.part_of(batch)));
}

std::optional<EvalContribution> ContextParallelStrategy::evaluate_batch(const data::Batch& batch) {
  return DdpStrategy::evaluate_batch(context_.part_of(batch));
}

void ContextParallelStrategy::sum_over_job(EvalSums& sums) {
  DdpStrategy::sum_over_job(sums);
  // Every rank of a group counted the whole batch, each with the mean loss of its tokens: the sums
  // are N times one replica's.
  const int n = context_.ranks();
  sums.loss_sum /= n;
  sums.samples /= n;
  sums.weight /= n;
  sums.correct /= n;
}

}  // namespace tessera::train
