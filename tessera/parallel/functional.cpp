#include "tessera/parallel/functional.h"

#include <chrono>

#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel {

void check_wire_dtype(DType wire, const char* what) {
  TESSERA_CHECK(wire == DType::Float32 || wire == DType::BFloat16, what, " travel as float32 or bfloat16, not ",
                dtype_name(wire));
}

Tensor summed_over_ranks(const Tensor& x, dist::ProcessGroup& group, DType wire) {
  NoGradGuard no_grad;
  check_wire_dtype(wire, "[summed_over_ranks] values");
  if (wire == DType::BFloat16) {
    Tensor y = x.to(DType::BFloat16);
    group.blocking_allreduce(y, dist::ReduceOp::Sum);
    return y.to(DType::Float32);
  }
  Tensor y = clone(x);  // contiguous, and leaves x alone
  group.blocking_allreduce(y, dist::ReduceOp::Sum);
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

namespace {

Tensor exchanged_blocks(const Tensor& x, dist::ProcessGroup& group, ExchangeTally* tally) {
  NoGradGuard no_grad;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor input = contiguous(x);
  const auto start = std::chrono::steady_clock::now();
  group.alltoall(input, y)->wait();
  if (tally) {
    tally->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tally->bytes += static_cast<int64_t>(input.numel() * dtype_size(input.dtype()));
    ++tally->calls;
  }
  return y;
}

}  // namespace

Tensor all_to_all(const Tensor& x, dist::ProcessGroup& group, ExchangeTally* tally) {
  TESSERA_CHECK(x.defined() && x.dtype() == DType::Float32 && x.dim() >= 1 && x.shape()[0] % group.size() == 0,
                "[all_to_all] expects a float32 tensor whose rows divide into ", group.size(), " equal blocks, got ",
                x.defined() ? std::string(dtype_name(x.dtype())) + " of shape " + shape_str(x.shape()) : "an undefined tensor",
                " on rank ", group.rank());
  dist::ProcessGroup* g = &group;
  return autograd::record(exchanged_blocks(x, group, tally), "AllToAllBackward", {x}, [g, tally](const Tensor& grad) {
    return std::vector<Tensor>{exchanged_blocks(grad, *g, tally)};
  }, autograd::Saves::Nothing);
}

namespace {

// Every rank's (rows, elements per row), from one small all-gather.
std::vector<int64_t> rows_and_widths(const Tensor& x, dist::ProcessGroup& group) {
  const int64_t rows = x.shape()[0], width = shape_numel(Shape(x.shape().begin() + 1, x.shape().end()));
  Tensor mine = from_vector(std::vector<int64_t>{rows, width}, {2});
  Tensor all = zeros({2 * static_cast<int64_t>(group.size())}, DType::Int64);
  group.allgather(mine, all)->wait();
  return all.to_vector<int64_t>();
}

}  // namespace

Tensor all_gather_with_grad(const Tensor& x, dist::ProcessGroup& group) {
  TESSERA_CHECK(x.defined() && x.dtype() == DType::Float32 && x.dim() >= 1,
                "[all_gather_with_grad] expects a float32 tensor of at least one dimension, got ",
                x.defined() ? std::string(dtype_name(x.dtype())) + " of shape " + shape_str(x.shape()) : "an undefined tensor",
                " on rank ", group.rank());
  const int world = group.size(), rank = group.rank();
  const std::vector<int64_t> sizes = rows_and_widths(x, group);
  std::vector<int64_t> counts(world);
  int64_t total_rows = 0;
  for (int r = 0; r < world; ++r) {
    TESSERA_CHECK(sizes[2 * r + 1] == sizes[2 * rank + 1], "[all_gather_with_grad] rank ", rank, "'s rows hold ",
                  sizes[2 * rank + 1], " elements (shape ", shape_str(x.shape()), ") but rank ", r, "'s hold ",
                  sizes[2 * r + 1], ": every rank must gather rows of one shape");
    counts[r] = sizes[2 * r] * sizes[2 * r + 1];
    total_rows += sizes[2 * r];
  }
  Shape out_shape = x.shape();
  out_shape[0] = total_rows;
  Tensor y = Tensor::empty(out_shape);
  {
    NoGradGuard no_grad;
    group.allgather(contiguous(x), y, counts)->wait();
  }
  dist::ProcessGroup* g = &group;
  const Shape in_shape = x.shape();
  return autograd::record(y, "AllGatherWithGradBackward", {x}, [g, counts, in_shape](const Tensor& grad) {
    NoGradGuard no_grad;
    Tensor mine = Tensor::empty(in_shape);
    g->reduce_scatter(contiguous(grad), mine, counts, dist::ReduceOp::Sum)->wait();
    return std::vector<Tensor>{mine};
  }, autograd::Saves::Nothing);
}

}  // namespace tessera::parallel
