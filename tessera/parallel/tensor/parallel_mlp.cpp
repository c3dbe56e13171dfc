#include "tessera/parallel/tensor/parallel_mlp.h"

namespace tessera::parallel::tensor {

ParallelMLP::ParallelMLP(const nn::Sequential& full, dist::ProcessGroupPtr group, SequenceParallel sequence)
    : group_(group), sequence_(sequence) {
  auto fc_full = full.size() == 4 ? std::dynamic_pointer_cast<nn::Linear>(full[0]) : nullptr;
  auto proj_full = full.size() == 4 ? std::dynamic_pointer_cast<nn::Linear>(full[2]) : nullptr;
  auto drop_full = full.size() == 4 ? std::dynamic_pointer_cast<nn::Dropout>(full[3]) : nullptr;
  TESSERA_CHECK(fc_full && std::dynamic_pointer_cast<nn::GELU>(full[1]) && proj_full && drop_full,
                "[ParallelMLP] expects the Transformer MLP Sequential{Linear, GELU, Linear, Dropout}, got a Sequential "
                "of ", full.size(), " layers");
  fc = register_module("0", std::make_shared<ColumnParallelLinear>(*fc_full, group, ColumnParallelOptions{false, 1, sequence}));
  act = register_module("1", std::make_shared<nn::GELU>());
  proj = register_module("2", std::make_shared<RowParallelLinear>(*proj_full, group, RowParallelOptions{true, sequence}));
  drop = register_module("3", std::make_shared<nn::Dropout>(drop_full->p));
}

Tensor ParallelMLP::forward(const Tensor& x) {
  Tensor y = proj->forward(act->forward(fc->forward(x)));  // (..., 4C/world) inside
  return dropout_of(*drop, y, sequence_, group_);
}

}  // namespace tessera::parallel::tensor
