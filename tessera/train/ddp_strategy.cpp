#include "tessera/train/ddp_strategy.h"

#include "tessera/parallel/sync_batch_norm.h"
#include "tessera/train/expert_parallelism.h"

namespace tessera::train {

DdpStrategy::DdpStrategy(const TrainConfig& config, dist::ProcessGroupPtr group, bool values_from_caller)
    : config_(config), group_(std::move(group)), values_from_caller_(values_from_caller) {
  TESSERA_CHECK(group_, "[ddp] needs the job's process group");
}

std::vector<Tensor> DdpStrategy::prepare(std::shared_ptr<nn::Module> model) {
  pool_routing_over_replicas(*model, *group_);  // replicated experts: the balancing loss still one process's
  return prepare_replicas(std::move(model), {});
}

std::vector<Tensor> DdpStrategy::prepare_replicas(std::shared_ptr<nn::Module> model, std::set<std::string> kept_out) {
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
  o.ignored_parameters = std::move(kept_out);
  o.broadcast_initial_state = !values_from_caller_;
  ddp_ = std::make_unique<parallel::ddp::DistributedDataParallel>(model, group_, o);
  return LocalStrategy::prepare(std::move(model));
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
