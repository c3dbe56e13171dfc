#include "tessera/train/zero_strategy.h"

#include <algorithm>

#include "tessera/parallel/zero/sharded_checkpoint.h"
#include "tessera/train/expert_parallelism.h"

namespace tessera::train {

ZeroStrategy::ZeroStrategy(const TrainConfig& config, dist::ProcessGroupPtr group, parallel::zero::HybridGroups hybrid,
                           bool values_from_caller)
    : config_(config), group_(std::move(group)), hybrid_(std::move(hybrid)), values_from_caller_(values_from_caller) {
  TESSERA_CHECK(group_, "[zero] needs the job's process group");
}

std::vector<Tensor> ZeroStrategy::prepare(std::shared_ptr<nn::Module> model) {
  const auto& d = config_.distributed;
  parallel::zero::ZeroOptions o;
  o.stage = static_cast<int>(d.zero_stage);
  if (d.bucket_cap_mb > 0) o.bucket_cap_bytes = static_cast<size_t>(d.bucket_cap_mb * (1 << 20));  // else ZeRO's own
  o.wrap_policy = d.zero_wrap_policy;
  o.min_unit_bytes = static_cast<size_t>(d.zero_min_unit_mb * (1 << 20));
  o.reduce_dtype = wire_dtype(config_);
  o.replicas = hybrid_.replicas;
  o.broadcast_initial_state = !values_from_caller_;
  pool_routing_over_replicas(*model, *group_);
  zero_ = std::make_unique<parallel::zero::ZeroDataParallel>(model, hybrid_.shard ? hybrid_.shard : group_, o);
  model_ = std::move(model);
  return zero_->parameters();
}

void ZeroStrategy::attach_once(optim::Optimizer& optimizer) {
  // The trainer builds the optimizer over prepare's pieces after prepare: attach it at first use.
  if (attached_ == &optimizer) return;
  zero_->attach(optimizer);
  attached_ = &optimizer;
}

void ZeroStrategy::optimizer_step(optim::Optimizer& optimizer) {
  attach_once(optimizer);
  zero_->step(optimizer);
}

void ZeroStrategy::commit_step(const optim::Optimizer& optimizer, int64_t step) {
  if (!shards_live_state()) return;
  if (!buddies_) buddies_ = std::make_unique<parallel::zero::ShardBuddies>(*zero_);
  buddies_->commit(optimizer, step);
}

bool ZeroStrategy::unscale_gradients(double inv_scale) {
  const bool overflow = any_rank(zero_->unscale_gradients(inv_scale));
  if (overflow) zero_->zero_grad();  // the pieces accumulate across backward passes until a step
  return overflow;
}

void ZeroStrategy::set_training(bool training) {
  model_->train(training);
  if (training) zero_->hold_gathered(false);
}

nn::StateDict ZeroStrategy::model_state() {
  nn::StateDict state = zero_->full_state_dict();  // collective
  return rank() == 0 ? state : nn::StateDict{};
}

nn::StateDict ZeroStrategy::optimizer_state(const optim::Optimizer& optimizer) {
  nn::StateDict state = zero_->full_optimizer_state(optimizer);  // collective
  return rank() == 0 ? state : nn::StateDict{};
}

void ZeroStrategy::load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
  attach_once(optimizer);
  zero_->load_full_optimizer_state(optimizer, state);
}

std::vector<io::SavePiece> ZeroStrategy::checkpoint_pieces(const optim::Optimizer& optimizer) {
  if (hybrid_.replicas && hybrid_.replicas->rank() != 0) return {};  // the replicas are equal; the first writes
  return parallel::zero::sharded_pieces(*zero_, optimizer);
}

std::vector<std::string> ZeroStrategy::checkpoint_order() const { return parallel::zero::sharded_order(*zero_); }

void ZeroStrategy::load_pieces(io::PieceReader& reader, optim::Optimizer& optimizer) {
  attach_once(optimizer);
  parallel::zero::load_pieces(*zero_, optimizer, reader);
}

void ZeroStrategy::add_step_metrics(nlohmann::json& record) const {
  LocalStrategy::add_step_metrics(record);
  const parallel::zero::ZeroMemory m = zero_->memory(attached_);
  record["comm_bytes_total"] = zero_->bytes_communicated();
  record["zero_parameter_bytes"] = m.parameters;
  record["zero_gradient_bytes"] = m.gradients;
  record["zero_optimizer_state_bytes"] = m.optimizer_state;
  const int64_t peak = record_peak_allocated_bytes(record);
  // The fourth category of the peak: activations, and what is in flight at the peak (a unit's
  // gradients being reduced, stage 3's gathered units) — as `tessera bench zero`'s "activ.+".
  record["zero_activation_peak_bytes"] = std::max<int64_t>(0, peak - m.total());
}

std::string ZeroStrategy::describe() const {
  int64_t params = 0;
  for (const auto& unit : zero_->units()) params += unit.numel;
  const std::string layout =
      hybrid_.replicas ? detail::concat("hsdp, ", hybrid_.replicas->size(), hybrid_.replicas->size() == 1 ? " replica" : " replicas",
                                        " of ", zero_->group()->size(), " ranks, zero stage ", zero_->stage(), " inside each")
                       : detail::concat("zero stage ", zero_->stage());
  return detail::concat(layout, ": ", params, " parameters in ", zero_->units().size(), " units, each cut into ",
                        zero_->group()->size(), " pieces");
}

}  // namespace tessera::train
