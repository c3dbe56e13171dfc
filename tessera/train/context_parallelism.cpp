#include "tessera/train/context_parallelism.h"

#include "tessera/nn/char_transformer.h"
#include "tessera/ops/ops.h"

namespace tessera::train {

ContextParallelism::ContextParallelism(dist::ProcessGroupPtr world, int ranks_per_group,
                                       parallel::context::ContextAttention attention)
    : world_(std::move(world)), ranks_(ranks_per_group), attention_(attention) {
  const int size = world_->size();
  TESSERA_CHECK(ranks_ >= 1 && size % ranks_ == 0, "[context parallel] parallel.cp = ", ranks_,
                " must divide the world size ", size, " (each sequence is cut over groups of that many ranks)");
  for (int first = 0; first < size; first += ranks_) {  // every rank creates every group, in order
    std::vector<int> members;
    for (int r = first; r < first + ranks_; ++r) members.push_back(r);
    auto g = world_->new_group(members);
    if (world_->rank() >= first && world_->rank() < first + ranks_) group_ = g;
  }
}

void ContextParallelism::spread(nn::Module& model) {
  auto* gpt = dynamic_cast<nn::CharTransformer*>(&model);
  TESSERA_CHECK(gpt != nullptr, "[context parallel] parallel.cp cuts the sequences of model.name = 'transformer' "
                "(the GPT); this model is a ", model.name());
  gpt->spread_sequence(group_, attention_);
}

data::Batch ContextParallelism::part_of(const data::Batch& batch) const {
  const int64_t T = batch.inputs.dim() == 2 ? batch.inputs.shape()[1] : -1;
  TESSERA_CHECK(T > 0 && T % ranks_ == 0 && batch.targets.dim() == 2 && batch.targets.shape()[1] == T,
                "[context parallel] expected inputs and targets (B, T) with T divisible by parallel.cp = ", ranks_,
                ", got ", shape_str(batch.inputs.shape()), " and ", shape_str(batch.targets.shape()));
  const auto runs = parallel::context::context_runs(group_->rank(), ranks_, T / ranks_, attention_);
  NoGradGuard no_grad;
  auto columns = [&](const Tensor& t) {  // a slice per run of this rank's tokens
    std::vector<Tensor> parts;
    for (const auto& run : runs) parts.push_back(slice(t, 1, run.first_position, run.first_position + run.length));
    return parts.size() == 1 ? contiguous(parts[0]) : cat(parts, 1);
  };
  return {columns(batch.inputs), columns(batch.targets)};
}

double ContextParallelism::mean_over_group(double value) const {
  Tensor t = from_vector(std::vector<float>{static_cast<float>(value)}, {1});
  group_->blocking_allreduce(t);
  return static_cast<double>(t.to_vector<float>()[0]) / ranks_;
}

void ContextParallelism::count_groups_once(EvalSums& sums) const {
  sums.loss_sum /= ranks_;
  sums.samples /= ranks_;
  sums.weight /= ranks_;
  sums.correct /= ranks_;
}

std::string ContextParallelism::describe() const {
  const int first = replica() * ranks_;
  return "context group " + std::to_string(replica()) + " of " + std::to_string(replicas()) + " (ranks " +
         std::to_string(first) + "-" + std::to_string(first + ranks_ - 1) + "): part " +
         std::to_string(group_->rank() + 1) + "/" + std::to_string(ranks_) + " of each sequence, " +
         (attention_ == parallel::context::ContextAttention::Ring ? "ring" : "Ulysses") + " attention";
}

}  // namespace tessera::train
