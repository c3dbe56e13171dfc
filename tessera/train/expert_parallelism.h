// Expert parallelism over DDP's ranks (parallel.ep = N, DeepSpeed-MoE's and Megatron's layout): the
// ranks form groups of N consecutive ranks, and each group spreads every mixture's experts over its
// members (nn/mixture_of_experts.h), each rank keeping E / N of them; the rest of the model stays a
// DDP replica. The experts' gradients then need their own reduction: an expert's gradient on its
// rank already sums its group's tokens (the all-to-all's backward brought them), so it is summed
// over the expert's replicas (the ranks holding the same experts in the other groups) and divided by
// the world size, as DDP divides the rest.
//
// Checkpoints hold the whole model: the experts' tensors (and their optimizer state) are gathered
// along their expert dimension over the group, and a load keeps each rank's own slice, so a run
// resumes at any world size or N, one process included.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"

namespace tessera::train {

// Pools every mixture of experts' routing statistics of `model` (nn/mixture_of_experts.h) over
// `group`'s ranks, on a group of their own (their all-reduce runs in backward, where the gradients'
// are in flight on `group`), so that the load-balancing loss is one process's over the global
// batch. Collective over `group` when the model has mixtures; nothing otherwise. Returns that group.
dist::ProcessGroupPtr pool_routing_over_replicas(nn::Module& model, dist::ProcessGroup& group);

class ExpertParallelism {
 public:
  // Collective over `world`: creates the expert groups and the experts' replica groups.
  ExpertParallelism(dist::ProcessGroupPtr world, int ranks_per_group);

  // Spreads every mixture of `model` over this rank's expert group and pools their routing
  // statistics over the world. Returns the expert parameters' names (kept out of DDP). Call once;
  // collective over the world.
  std::set<std::string> place(nn::Module& model);
  // After backward: each expert gradient summed over its replicas, then divided by the world size.
  void reduce_gradients();
  // Scales every gradient of `parameters` (the local model's parameters(), in their order) so that
  // their global norm is at most max_norm: the replicated parameters' norm is the same on every
  // rank, the experts' adds up over the group. Collective over the expert group.
  void clip_gradients(const std::vector<Tensor>& parameters, double max_norm);

  // The whole model's state from this rank's: expert tensors gathered over the group. Collective.
  nn::StateDict gather(const nn::StateDict& local) const;
  // This rank's part of a whole model's state: its slice of every expert tensor.
  nn::StateDict cut(const nn::StateDict& whole) const;
  // The same for an optimizer's state ("<parameter index>.<buffer>", indices in the model's
  // parameter order, as the optimizer holds them).
  nn::StateDict gather_optimizer(const nn::StateDict& local) const;
  nn::StateDict cut_optimizer(const nn::StateDict& whole) const;

  std::string describe() const;  // "expert group 0 of 2 (ranks 0-1), experts 4-7 of 8 per mixture"

 private:
  bool is_expert_tensor(const std::string& key) const;
  bool is_expert_state(const std::string& key) const;
  Tensor gathered(const Tensor& local) const;
  Tensor own_slice(const Tensor& whole, const std::string& key) const;

  dist::ProcessGroupPtr world_, group_, replicas_;
  int ranks_;
  std::set<std::string> expert_names_;
  std::set<int64_t> expert_indices_;  // in the model's (the optimizer's) parameter order
  std::vector<Tensor> experts_;
  int64_t experts_per_mixture_ = 0;
};

}  // namespace tessera::train
