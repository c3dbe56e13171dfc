// A mixture-of-experts feed-forward block (GShard, Switch Transformer, Mixtral): a router picks each
// token's top_k of `experts` MLPs (Linear(C, H) - GELU - Linear(H, C)), each expert takes at most its
// capacity of tokens (nn/expert_routing.h), and the token's output is the experts' outputs weighted
// by their router probabilities (renormalised over the top_k when top_k > 1). The experts' weights
// are stacked (expert first) so that all experts run as one batched matmul, and so that expert
// parallelism is a cut of dimension 0.
//
// The load-balancing loss (Switch): aux_loss_weight · E · Σ_e f_e · P_e, with f_e the share of
// choices naming expert e and P_e its mean probability, 1·weight at a perfect balance. It is not
// part of forward's output: training strategies add take_auxiliary_loss() to the loss. It is made
// only by a training forward with gradients on (activation checkpointing's first forward has them
// off, so the two do not go together).
//
// Expert parallelism (place_experts): each rank of the expert group keeps E / ranks experts; tokens
// go to their expert's rank and come back with one differentiable all-to-all each way
// (parallel/functional.h), every rank sending each expert `capacity` rows. Routing statistics can be
// pooled over every data-parallel rank (pool_routing_over), which makes the load-balancing loss and
// its gradient those of one process over the global batch. Capacity is per rank (its own tokens),
// as in GShard's groups: training equals one process's when no token is dropped, and equals
// replicated experts on the same ranks always.
#pragma once
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/layers.h"
#include "tessera/parallel/functional.h"

namespace tessera::nn {

struct MoeConfig {
  int64_t experts = 0;  // 0: a dense MLP, no mixture
  int64_t top_k = 2;
  double capacity_factor = 1.25;
  double aux_loss_weight = 0.01;
};

// The last training forward's routing, pooled over the ranks given to pool_routing_over.
struct RoutingStats {
  std::vector<int64_t> chosen;  // per expert: the choices naming it
  int64_t choices = 0;          // tokens · top_k
  int64_t dropped = 0;          // choices dropped for capacity
  double aux_loss = 0.0;        // the load-balancing loss, weight included
  // Expert parallelism: this rank's all-to-alls since that forward began (its backward's too).
  parallel::ExchangeTally exchanges;
};

class MixtureOfExperts : public Module {
 public:
  MixtureOfExperts(int64_t embed_dim, int64_t hidden, MoeConfig config, float dropout = 0.0f);
  Tensor forward(const Tensor& x) override;  // (..., C) -> (..., C)
  std::string name() const override { return "MixtureOfExperts"; }

  // Keeps experts [rank·E/ranks, (rank+1)·E/ranks) of `expert_group` (E must divide); the others'
  // tokens travel to them. Every rank of the group then runs each forward and backward together.
  void place_experts(dist::ProcessGroupPtr expert_group);
  // Pools the routing statistics over `replicas` (every rank training on its own tokens). Each
  // training forward then costs one small all-reduce there (and one more in backward).
  void pool_routing_over(dist::ProcessGroupPtr replicas);
  // The load-balancing loss of the last training forward (undefined when there was none, or the
  // weight is 0), handed over once.
  Tensor take_auxiliary_loss();
  const RoutingStats& last_routing() const { return stats_; }
  // Whether a parameter (this module's own name, e.g. "fc_weight") is one of the stacked experts'.
  static bool is_expert_parameter(const std::string& name);
  int64_t first_expert() const { return first_expert_; }
  int64_t local_experts() const { return fc_weight.shape()[0]; }

  MoeConfig config;
  int64_t embed_dim, hidden;
  std::shared_ptr<Linear> router;  // C -> E, no bias
  Tensor fc_weight, fc_bias;       // (E, C, H), (E, H)
  Tensor proj_weight, proj_bias;   // (E, H, C), (E, C)
  std::shared_ptr<Dropout> drop;

 private:
  Tensor run_experts(const Tensor& dispatched, int64_t capacity);
  // Training's exchanges are tallied for the metrics; evaluation's are not.
  parallel::ExchangeTally* tally() { return is_training() ? &stats_.exchanges : nullptr; }
  void note_routing(const Tensor& probs, const struct ExpertRouting& routing);

  int64_t first_expert_ = 0;
  dist::ProcessGroupPtr expert_group_, replicas_;
  Tensor pending_aux_;
  RoutingStats stats_;
};

using NamedMixtures = std::vector<std::pair<std::string, std::shared_ptr<MixtureOfExperts>>>;
// Every MixtureOfExperts in `module`, with its dotted prefix ("h.0.moe.").
NamedMixtures mixtures_of_experts(const Module& module);
// The sum of every mixture's take_auxiliary_loss() (undefined when none has one).
Tensor take_auxiliary_losses(const NamedMixtures& mixtures);

}  // namespace tessera::nn
