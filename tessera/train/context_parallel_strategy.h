// ContextParallel<Base> (parallel.cp = N): a data-parallel strategy (DDP, or ZeRO / HSDP as TorchTitan
// pairs FSDP with context parallelism) whose replicas are groups of N ranks, each rank of a group holding
// T/N tokens of every sequence the group reads (context_parallelism.h holds the groups and the cut;
// parallel/context the attention across it). The base averages the gradients over the world as it
// would anyway: each rank's loss is the mean over its tokens, the same number on every rank, so the
// average is the mean over every token of the global batch, one process's.
#pragma once
#include "tessera/train/context_parallelism.h"
#include "tessera/train/ddp_strategy.h"
#include "tessera/train/zero_strategy.h"

namespace tessera::train {

template <typename Base>
class ContextParallel : public Base {
 public:
  // Collective over `group`: the context groups are made here, before the trainer reads the shares.
  // `more` goes to the base after the config and the group (HSDP's hybrid groups).
  template <typename... More>
  ContextParallel(const TrainConfig& config, dist::ProcessGroupPtr group, More&&... more)
      : Base(config, group, std::forward<More>(more)...),
        context_(group, static_cast<int>(config.parallel.cp),
                 parallel::context::context_attention(config.parallel.cp_attention)) {}
  // A group is one replica: it reads one share of each batch.
  DataShare data_share() const override { return {context_.replica(), context_.replicas()}; }
  std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) override {
    context_.spread(*model);
    return Base::prepare(std::move(model));
  }
  // This rank's tokens of the batch; the loss reported is the group's (the whole sequences').
  double forward_backward(const data::Batch& batch) override {
    return context_.mean_over_group(Base::forward_backward(context_.part_of(batch)));
  }
  std::optional<EvalContribution> evaluate_batch(const data::Batch& batch) override {
    return Base::evaluate_batch(context_.part_of(batch));
  }
  void sum_over_job(EvalSums& sums) override {
    Base::sum_over_job(sums);
    context_.count_groups_once(sums);
  }
  std::string describe() const override {
    const std::string base = Base::describe();
    return (base.empty() ? "[" + Base::name() + "] " : base + "; ") + context_.describe();
  }

 private:
  ContextParallelism context_;
};

}  // namespace tessera::train
