#include "tessera/nn/mixture_of_experts.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/expert_routing.h"
#include "tessera/nn/init.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/functional.h"

namespace tessera::nn {
namespace {

Tensor index_tensor(const std::vector<int64_t>& values, Device device) {
  Tensor t = from_vector(values, {static_cast<int64_t>(values.size())});
  return device.is_cpu() ? t : t.to(device);
}

}  // namespace

MixtureOfExperts::MixtureOfExperts(int64_t c, int64_t h, MoeConfig moe, float dropout)
    : config(moe), embed_dim(c), hidden(h) {
  TESSERA_CHECK(moe.experts >= 1 && moe.top_k >= 1 && moe.top_k <= moe.experts, "[moe] needs experts >= 1 and "
                "1 <= top_k <= experts, got ", moe.experts, " experts, top_k ", moe.top_k);
  TESSERA_CHECK(moe.capacity_factor > 0 && moe.aux_loss_weight >= 0, "[moe] capacity_factor must be positive and "
                "aux_loss_weight not negative, got ", moe.capacity_factor, " and ", moe.aux_loss_weight);
  router = register_module("router", std::make_shared<Linear>(c, moe.experts, false));
  fc_weight = register_parameter("fc_weight", init::uniform_fan_in({moe.experts, c, h}, c));
  fc_bias = register_parameter("fc_bias", init::uniform_fan_in({moe.experts, h}, c));
  proj_weight = register_parameter("proj_weight", init::uniform_fan_in({moe.experts, h, c}, h));
  proj_bias = register_parameter("proj_bias", init::uniform_fan_in({moe.experts, c}, h));
  drop = register_module("drop", std::make_shared<Dropout>(dropout));
}

bool MixtureOfExperts::is_expert_parameter(const std::string& name) {
  return name == "fc_weight" || name == "fc_bias" || name == "proj_weight" || name == "proj_bias";
}

void MixtureOfExperts::place_experts(dist::ProcessGroupPtr group) {
  TESSERA_CHECK(group != nullptr, "[moe] place_experts needs an expert-parallel group");
  const int ranks = group->size();
  TESSERA_CHECK(local_experts() == config.experts && config.experts % ranks == 0, "[moe] ", config.experts,
                " experts cannot be spread evenly over ", ranks, " expert-parallel ranks",
                local_experts() != config.experts ? " (they are spread already)" : "");
  const int64_t per_rank = config.experts / ranks;
  first_expert_ = per_rank * group->rank();
  auto keep = [&](const char* name, Tensor& member) {
    NoGradGuard no_grad;
    member = clone(slice(member, 0, first_expert_, first_expert_ + per_rank));
    set_parameter(name, member);
  };
  keep("fc_weight", fc_weight);
  keep("fc_bias", fc_bias);
  keep("proj_weight", proj_weight);
  keep("proj_bias", proj_bias);
  expert_group_ = std::move(group);
}

void MixtureOfExperts::pool_routing_over(dist::ProcessGroupPtr replicas) { replicas_ = std::move(replicas); }

Tensor MixtureOfExperts::take_auxiliary_loss() { return std::exchange(pending_aux_, Tensor()); }

Tensor MixtureOfExperts::forward(const Tensor& x) {
  TESSERA_CHECK(x.dim() >= 2 && x.shape().back() == embed_dim, "[moe] expected (..., ", embed_dim, "), got ",
                shape_str(x.shape()));
  const int64_t C = embed_dim, E = config.experts, k = config.top_k, N = x.numel() / C;
  if (is_training()) stats_.exchanges = {};
  Tensor tokens = reshape(x, {N, C});
  Tensor probs = softmax(router->forward(tokens), 1);  // (N, E)
  int64_t capacity = expert_capacity(N, E, k, config.capacity_factor);
  if (expert_group_) {  // every rank sends each expert the same number of rows
    Tensor c = from_vector(std::vector<int64_t>{capacity}, {1});
    expert_group_->blocking_allreduce(c, dist::ReduceOp::Max);
    capacity = c.to_vector<int64_t>()[0];
  }
  Tensor host_probs = contiguous(probs.detach().to(cpu_device()));
  const ExpertRouting routing = route_tokens(host_probs.data<float>(), N, E, k, capacity);

  // The gates: each choice's probability, renormalised over the token's top_k.
  std::vector<int64_t> picked(N * k);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < k; ++j) picked[t * k + j] = t * E + routing.choice[t * k + j];
  Tensor gates = index_select(reshape(probs, {N * E}), 0, index_tensor(picked, x.device()));
  if (k > 1) {
    Tensor per_token = reshape(gates, {N, k});
    gates = reshape(div(per_token, sum(per_token, {1}, true)), {N * k});
  }

  // Dispatch (a zero row for the empty places), the experts, combine (a zero row for dropped choices).
  Tensor padded = cat({tokens, zeros({1, C}).to(x.device())}, 0);
  Tensor dispatched = index_select(padded, 0, index_tensor(routing.slot_token, x.device()));  // (E·capacity, C)
  Tensor answered = cat({run_experts(dispatched, capacity), zeros({1, C}).to(x.device())}, 0);
  Tensor chosen = index_select(answered, 0, index_tensor(routing.slot, x.device()));  // (N·k, C)
  Tensor y = sum(reshape(mul(chosen, reshape(gates, {N * k, 1})), {N, k, C}), {1});
  if (is_training()) note_routing(probs, routing);
  return drop->forward(reshape(y, x.shape()));
}

Tensor MixtureOfExperts::run_experts(const Tensor& dispatched, int64_t capacity) {
  const int64_t C = embed_dim, local = local_experts();
  const int64_t ranks = expert_group_ ? expert_group_->size() : 1;
  Tensor rows = dispatched;
  if (expert_group_) {
    // Block j (experts of rank j) goes to rank j; what arrives is [source rank][local expert][row].
    rows = parallel::all_to_all(dispatched, *expert_group_, tally());
    rows = permute(reshape(rows, {ranks, local, capacity, C}), {1, 0, 2, 3});
  }
  rows = reshape(rows, {local, ranks * capacity, C});
  Tensor h = gelu(add(matmul(rows, fc_weight), unsqueeze(fc_bias, 1)));
  Tensor out = add(matmul(h, proj_weight), unsqueeze(proj_bias, 1));  // (local, ranks·capacity, C)
  if (!expert_group_) return reshape(out, {local * capacity, C});
  out = reshape(permute(reshape(out, {local, ranks, capacity, C}), {1, 0, 2, 3}), {ranks * local * capacity, C});
  return parallel::all_to_all(out, *expert_group_, tally());
}

void MixtureOfExperts::note_routing(const Tensor& probs, const ExpertRouting& routing) {
  const int64_t E = config.experts;
  // The counts as int64 (exact at any batch), in one all-reduce; the probability sums in a second,
  // differentiable one, only where the balancing loss is wanted and can train the router.
  std::vector<int64_t> counts(routing.chosen.begin(), routing.chosen.end());
  counts.push_back(routing.tokens);
  counts.push_back(routing.dropped);
  Tensor pooled = from_vector(counts, {E + 2});
  if (replicas_) replicas_->blocking_allreduce(pooled);
  counts = pooled.to_vector<int64_t>();
  const int64_t tokens = counts[E];
  stats_.chosen.assign(counts.begin(), counts.begin() + E);
  stats_.choices = tokens * config.top_k;
  stats_.dropped = counts[E + 1];
  stats_.aux_loss = 0.0;
  if (config.aux_loss_weight <= 0 || !autograd::grad_enabled() || tokens == 0) return;
  Tensor prob_sums = sum(probs, {0});  // (E)
  if (replicas_) prob_sums = parallel::all_reduce_sum(prob_sums, *replicas_);
  std::vector<float> share(E);
  for (int64_t e = 0; e < E; ++e) share[e] = static_cast<float>(stats_.chosen[e]) / static_cast<float>(stats_.choices);
  Tensor f = from_vector(share, {E});
  if (!probs.device().is_cpu()) f = f.to(probs.device());
  Tensor mean_probs = mul(prob_sums, 1.0f / static_cast<float>(tokens));
  pending_aux_ = mul(sum(mul(mean_probs, f)), static_cast<float>(config.aux_loss_weight * E));
  stats_.aux_loss = pending_aux_.detach().to(cpu_device()).item<float>();
}

NamedMixtures mixtures_of_experts(const Module& module) {
  NamedMixtures found;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& [name, child] : m.children()) {
      if (auto moe = std::dynamic_pointer_cast<MixtureOfExperts>(child)) found.emplace_back(prefix + name + ".", moe);
      walk(*child, prefix + name + ".");
    }
  };
  walk(module, "");
  return found;
}

Tensor take_auxiliary_losses(const NamedMixtures& mixtures) {
  Tensor total;
  for (auto& [prefix, moe] : mixtures)
    if (Tensor aux = moe->take_auxiliary_loss(); aux.defined()) total = total.defined() ? add(total, aux) : aux;
  return total;
}

}  // namespace tessera::nn
