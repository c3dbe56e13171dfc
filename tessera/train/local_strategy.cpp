#include "tessera/train/local_strategy.h"

#include <algorithm>

#include "tessera/core/cpu_allocator.h"
#include "tessera/observe/trace.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/grad_scaler.h"

namespace tessera::train {

Tensor default_loss(const Tensor& output, const Tensor& targets) {
  if (output.dim() == 3) {  // language model: (B, T, V) against (B, T)
    const int64_t v = output.shape()[2];
    return cross_entropy(reshape(output, {-1, v}), reshape(targets, {-1}));
  }
  if (targets.dtype() == DType::Float32) return mse_loss(output, targets);  // regression (a linear model on a table)
  return cross_entropy(output, targets);
}

std::vector<Tensor> LocalStrategy::prepare(std::shared_ptr<nn::Module> model) {
  model_ = std::move(model);
  return model_->parameters();
}

double LocalStrategy::forward_backward(const data::Batch& batch) {
  Tensor loss, objective;
  {
    observe::TraceSpan span("forward", "train");
    loss = training_loss(training_forward(batch.inputs), batch.targets);
    // The mixtures' load-balancing losses join the gradient, not the loss reported.
    Tensor balancing = nn::take_auxiliary_losses(mixtures());
    objective = balancing.defined() ? add(loss, balancing) : loss;
  }
  observe::TraceSpan span("backward", "train");  // DDP's wait for the last buckets included
  if (loss_scale_ != 1.0)
    mul(objective, static_cast<float>(loss_scale_)).backward();
  else
    objective.backward();
  return loss.item<float>();
}

void LocalStrategy::clip_gradients(double max_norm) {
  // After DDP's all-reduce every replica holds the same gradients: the local norm is the global one.
  optim::clip_grad_norm(model_->parameters(), max_norm);
}

bool LocalStrategy::unscale_gradients(double inv_scale) {
  // DDP's replicas hold the same all-reduced gradients, yet agree anyway: one tiny all-reduce keeps
  // a rank from ever stepping alone.
  return any_rank(optim::unscale_gradients(model_->parameters(), inv_scale));
}

std::optional<EvalContribution> LocalStrategy::evaluate_batch(const data::Batch& batch) {
  Tensor output = evaluation_forward(batch.inputs);
  if (objective_.loss)
    return EvalContribution{objective_.loss(output, batch.targets, nullptr), {}, objective_.hits(output, batch.targets)};
  EvalContribution c{default_loss(output, batch.targets), {}};
  if (output.dim() == 2) c.output = output;
  return c;
}

const nn::NamedMixtures& LocalStrategy::mixtures() const {
  if (!mixtures_) mixtures_ = nn::mixtures_of_experts(*model_);
  return *mixtures_;
}

int64_t record_peak_allocated_bytes(nlohmann::json& record) {
  const auto peak = static_cast<int64_t>(cpu_allocator::peak_allocated_bytes());
  record["peak_allocated_bytes"] = peak;
  return peak;
}

void LocalStrategy::add_step_metrics(nlohmann::json& record) const {
  record_peak_allocated_bytes(record);
  const nn::NamedMixtures& mixtures = this->mixtures();
  if (mixtures.empty() || mixtures.front().second->last_routing().choices == 0) return;
  // Over the mixtures (layers): the balancing loss summed, dropped choices as a share of all, the
  // worst layer's busiest expert against the mean, and each expert's share averaged over layers.
  const size_t experts = mixtures.front().second->last_routing().chosen.size();
  double aux = 0, worst = 0;
  int64_t dropped = 0, choices = 0;
  std::vector<double> load(experts, 0.0);
  for (const auto& [prefix, moe] : mixtures) {
    const nn::RoutingStats& r = moe->last_routing();
    if (r.choices == 0 || r.chosen.size() != experts) continue;
    aux += r.aux_loss;
    dropped += r.dropped;
    choices += r.choices;
    int64_t busiest = 0;
    for (size_t e = 0; e < experts; ++e) {
      busiest = std::max(busiest, r.chosen[e]);
      load[e] += static_cast<double>(r.chosen[e]) / static_cast<double>(r.choices) / static_cast<double>(mixtures.size());
    }
    worst = std::max(worst, static_cast<double>(busiest) * static_cast<double>(experts) / static_cast<double>(r.choices));
  }
  record["moe_aux_loss"] = aux;
  record["moe_dropped_fraction"] = choices ? static_cast<double>(dropped) / static_cast<double>(choices) : 0.0;
  record["moe_dropped_choices"] = dropped;
  record["moe_load_max_over_mean"] = worst;
  record["moe_expert_load"] = load;
  parallel::ExchangeTally exchanges;
  for (const auto& [prefix, moe] : mixtures) exchanges += moe->last_routing().exchanges;
  if (exchanges.calls == 0) return;
  // Expert parallelism's dispatch and combine, forward and backward: compare the per-call figures
  // with `tessera bench comm --op alltoall` at moe_alltoall_bytes_per_call.
  record["moe_alltoall_ms"] = 1e3 * exchanges.seconds;
  record["moe_alltoall_calls"] = exchanges.calls;
  record["moe_alltoall_bytes_per_call"] = exchanges.bytes / exchanges.calls;
  record["moe_alltoall_algbw_gbps"] = exchanges.seconds > 0 ? exchanges.bytes / exchanges.seconds / 1e9 : 0.0;
}

int64_t max_over_job(dist::ProcessGroup& group, int64_t value) {
  Tensor t = Tensor::empty({1}, DType::Int64);
  t.data<int64_t>()[0] = value;
  group.blocking_allreduce(t, dist::ReduceOp::Max);
  return t.data<int64_t>()[0];
}

void sum_eval_over(dist::ProcessGroup& group, EvalSums& sums) {
  Tensor counts = Tensor::empty({3}, DType::Int64), loss = Tensor::empty({1});
  int64_t* c = counts.data<int64_t>();
  c[0] = sums.correct, c[1] = sums.samples, c[2] = sums.weight;
  loss.data<float>()[0] = static_cast<float>(sums.loss_sum);
  auto w1 = group.allreduce(counts, dist::ReduceOp::Sum), w2 = group.allreduce(loss, dist::ReduceOp::Sum);
  w1->wait();
  w2->wait();
  sums.correct = c[0], sums.samples = c[1], sums.weight = c[2];
  sums.loss_sum = loss.data<float>()[0];
}

}  // namespace tessera::train
