#include "tessera/parallel/functional.h"

#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel {

Tensor summed_over_ranks(const Tensor& x, dist::ProcessGroup& group) {
  NoGradGuard no_grad;
  Tensor y = clone(x);  // contiguous, and leaves x alone
  group.allreduce(y, dist::ReduceOp::Sum)->wait();
  return y;
}

Tensor all_reduce_sum(const Tensor& x, dist::ProcessGroup& group) {
  TESSERA_CHECK(x.defined() && x.dtype() == DType::Float32, "[all_reduce_sum] expects a float32 tensor, got ",
                x.defined() ? dtype_name(x.dtype()) : "an undefined tensor", " on rank ", group.rank());
  dist::ProcessGroup* g = &group;
  return autograd::record(summed_over_ranks(x, group), "AllReduceSumBackward", {x}, [g](const Tensor& grad) {
    return std::vector<Tensor>{summed_over_ranks(grad, *g)};
  }, autograd::Saves::Nothing);
}

}  // namespace tessera::parallel
