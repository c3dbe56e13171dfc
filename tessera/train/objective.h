// A model's own objective in place of default_loss (MIL-NCE's): its loss, given the group whose
// whole batch supplies the negatives (null for one process and in evaluation, where ranks evaluate
// apart), and the hits of an evaluation batch.
#pragma once
#include <cstdint>
#include <functional>

#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"

namespace tessera::train {

struct Objective {
  std::function<Tensor(const Tensor& output, const Tensor& targets, dist::ProcessGroup* group)> loss;
  std::function<int64_t(const Tensor& output, const Tensor& targets)> hits;
};

}  // namespace tessera::train
