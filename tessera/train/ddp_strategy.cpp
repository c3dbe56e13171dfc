#include "tessera/train/ddp_strategy.h"

#include "tessera/nn/mixture_of_experts.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/sync_batch_norm.h"

namespace tessera::train {

DdpStrategy::DdpStrategy(const TrainConfig& config, dist::ProcessGroupPtr group)
    : config_(config), group_(std::move(group)) {
  TESSERA_CHECK(group_, "[ddp] needs the job's process group");
  // Here, not in prepare: the data and evaluation shares, read before prepare, depend on them.
  if (config_.parallel.ep > 1) experts_ = std::make_unique<ExpertParallelism>(group_, static_cast<int>(config_.parallel.ep));
  if (config_.parallel.cp > 1)
    context_ = std::make_unique<ContextParallelism>(group_, static_cast<int>(config_.parallel.cp),
                                                    parallel::context::context_attention(config_.parallel.cp_attention));
}

std::vector<Tensor> DdpStrategy::prepare(std::shared_ptr<nn::Module> model) {
  const auto& d = config_.distributed;
  if (d.sync_batchnorm) model = parallel::convert_sync_batchnorm(model, group_);
  parallel::ddp::DdpOptions o;
  o.bucket_cap_bytes = parallel::ddp::bucket_cap_from_mb(d.bucket_cap_mb);
  o.comm_hook = d.comm_hook;
  // Mixed precision's gradients travel in bf16 (a hook of the user's choosing decides for itself).
  o.comm_hook_options.allreduce_dtype = wire_dtype(config_);
  o.comm_hook_options.powersgd_rank = static_cast<int>(d.powersgd_rank);
  o.comm_hook_options.powersgd_start_iter = d.powersgd_start_iter;
  o.comm_hook_options.topk_ratio = d.topk_ratio;
  o.find_unused_parameters = d.find_unused_parameters;
  if (context_) context_->spread(*model);
  if (experts_) {
    o.ignored_parameters = experts_->place(*model);
  } else {
    pool_routing_over_replicas(*model, *group_);  // replicated experts: the balancing loss still one process's
  }
  ddp_ = std::make_unique<parallel::ddp::DistributedDataParallel>(model, group_, o);
  return LocalStrategy::prepare(std::move(model));
}

double DdpStrategy::forward_backward(const data::Batch& batch) {
  const double loss = LocalStrategy::forward_backward(context_ ? context_->part_of(batch) : batch);
  if (experts_) experts_->reduce_gradients();
  return context_ ? context_->mean_over_group(loss) : loss;  // the loss over the replica's whole sequences
}

void DdpStrategy::clip_gradients(double max_norm) {
  if (experts_) return experts_->clip_gradients(model_->parameters(), max_norm);
  LocalStrategy::clip_gradients(max_norm);
}

nn::StateDict DdpStrategy::model_state() {
  if (!experts_) return LocalStrategy::model_state();
  nn::StateDict whole = experts_->gather(model_->state_dict());
  return rank() == 0 ? whole : nn::StateDict{};
}

void DdpStrategy::load_model_state(const nn::StateDict& state) {
  if (!experts_) return LocalStrategy::load_model_state(state);
  model_->load_state_dict(experts_->cut(state), true);
}

nn::StateDict DdpStrategy::optimizer_state(const optim::Optimizer& optimizer) {
  if (!experts_) return LocalStrategy::optimizer_state(optimizer);
  nn::StateDict whole = experts_->gather_optimizer(optimizer.state_dict());
  return rank() == 0 ? whole : nn::StateDict{};
}

void DdpStrategy::load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
  if (!experts_) return LocalStrategy::load_optimizer_state(optimizer, state);
  optimizer.load_state_dict(experts_->cut_optimizer(state));
}

std::optional<EvalContribution> DdpStrategy::evaluate_batch(const data::Batch& batch) {
  return LocalStrategy::evaluate_batch(context_ ? context_->part_of(batch) : batch);
}

void DdpStrategy::sum_over_job(EvalSums& sums) {
  if (experts_) return;  // with experts spread, every rank evaluated the whole set
  sum_eval_over(*group_, sums);
  if (!context_) return;
  // Every rank of a context group counted the whole batch, each with the mean loss of its tokens:
  // the group's sums are N times one replica's.
  const int n = context_->ranks();
  sums.loss_sum /= n;
  sums.samples /= n;
  sums.weight /= n;
  sums.correct /= n;
}

std::string DdpStrategy::describe() const {
  std::string text;
  if (context_) text += "[ddp] " + context_->describe();
  if (experts_) text += std::string(text.empty() ? "" : "\n") + "[ddp] " + experts_->describe();
  return text;
}

int64_t DdpStrategy::max_over_job(int64_t value) { return train::max_over_job(*group_, value); }

void DdpStrategy::add_step_metrics(nlohmann::json& record) const {
  // The per-step trace of gradient communication (reducer.h).
  const auto& trace = ddp_->reducer().last_iteration();
  record["comm_ms"] = 1e3 * trace.comm_seconds;
  record["exposed_comm_ms"] = 1e3 * trace.exposed_seconds;
  record["comm_bytes_total"] = ddp_->reducer().hook().bytes_communicated();
  LocalStrategy::add_step_metrics(record);
}

}  // namespace tessera::train
