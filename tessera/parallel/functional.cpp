#include "tessera/parallel/functional.h"

#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel {

Tensor all_reduce_sum(const Tensor& x, dist::ProcessGroup& group) {
  TESSERA_CHECK(x.defined() && x.dtype() == DType::Float32, "[all_reduce_sum] expects a float32 tensor, got ",
                x.defined() ? dtype_name(x.dtype()) : "an undefined tensor", " on rank ", group.rank());
  Tensor y;
  {
    NoGradGuard no_grad;  // the copy is not an op of its own; the record below is
    y = clone(x);         // contiguous, and leaves x alone
  }
  group.allreduce(y, dist::ReduceOp::Sum)->wait();
  dist::ProcessGroup* g = &group;
  return autograd::record(y, "AllReduceSumBackward", {x}, [g](const Tensor& grad) {
    NoGradGuard no_grad;
    Tensor summed = clone(grad);  // the engine may hand the same gradient to other nodes
    g->allreduce(summed, dist::ReduceOp::Sum)->wait();
    return std::vector<Tensor>{summed};
  }, autograd::Saves::Nothing);
}

}  // namespace tessera::parallel
