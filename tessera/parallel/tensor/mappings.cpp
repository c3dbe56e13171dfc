#include "tessera/parallel/tensor/mappings.h"

#include <chrono>

#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/functional.h"

namespace tessera::parallel::tensor {
namespace {

void check_input(const Tensor& x, const dist::ProcessGroupPtr& group, const char* op) {
  TESSERA_CHECK(group != nullptr, "[", op, "] needs a tensor-parallel process group, got null");
  TESSERA_CHECK(x.defined() && x.dtype() == DType::Float32, "[", op, "] expects a float32 tensor, got ",
                x.defined() ? dtype_name(x.dtype()) : "an undefined tensor", " on rank ", group->rank());
}

void check_last_dim(const Tensor& x, const dist::ProcessGroupPtr& group, const char* op) {
  TESSERA_CHECK(x.dim() >= 1, "[", op, "] expects a tensor with a last dimension to shard, got shape ",
                shape_str(x.shape()), " on rank ", group->rank());
}

// No autograd: every rank's (..., sizes[r]) side by side in rank order, (..., Σ sizes).
Tensor all_gather_last_dim(const Tensor& x, dist::ProcessGroup& group, const std::vector<int64_t>& sizes) {
  NoGradGuard no_grad;
  const int64_t n = x.shape().back();
  TESSERA_CHECK(static_cast<int>(sizes.size()) == group.size() && sizes[group.rank()] == n,
                "[gather_from_tensor_parallel_region] rank ", group.rank(), " holds ", n,
                " columns but the sizes given for it are ", sizes.size() > static_cast<size_t>(group.rank())
                    ? sizes[group.rank()] : -1, " (", sizes.size(), " sizes for ", group.size(), " ranks)");
  Shape lead(x.shape().begin(), x.shape().end() - 1);
  const int64_t rows = shape_numel(lead);
  int64_t total = 0;
  std::vector<int64_t> counts;
  for (int64_t s : sizes) {
    counts.push_back(rows * s);
    total += s;
  }
  Tensor flat = Tensor::empty({rows * total});
  group.allgather(contiguous(x), flat, counts)->wait();
  Shape out_shape = lead;
  out_shape.push_back(total);
  Tensor out = Tensor::empty(out_shape);
  Tensor out2d = out.view({rows, total});
  int64_t offset = 0, column = 0;
  for (int64_t s : sizes) {
    Tensor dst = out2d.slice(1, column, column + s);
    copy_(dst, flat.slice(0, offset, offset + rows * s).view({rows, s}));
    offset += rows * s;
    column += s;
  }
  return out;
}

// Columns [begin, end) of the last dim, as a new contiguous tensor.
Tensor last_dim_part(const Tensor& x, int64_t begin, int64_t end) {
  NoGradGuard no_grad;
  return clone(x.slice(x.dim() - 1, begin, end));
}

thread_local DType wire_now = DType::Float32;
thread_local TensorParallelCommTally* tally_now = nullptr;

// summed_over_ranks, its time and bytes added to `tally` (where given).
Tensor summed_and_counted(const Tensor& x, dist::ProcessGroup& group, DType wire, TensorParallelCommTally* tally) {
  const auto start = std::chrono::steady_clock::now();
  Tensor y = summed_over_ranks(x, group, wire);
  if (tally) {  // summed_over_ranks sends x as `wire`
    tally->exposed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tally->bytes += x.numel() * static_cast<int64_t>(dtype_size(wire));
    tally->calls += 1;
  }
  return y;
}

}  // namespace

TensorParallelCommTallyScope::TensorParallelCommTallyScope(TensorParallelCommTally* tally) : previous_(tally_now) {
  tally_now = tally;
}

TensorParallelCommTallyScope::~TensorParallelCommTallyScope() { tally_now = previous_; }

TensorParallelCommTally* tensor_parallel_tally() { return tally_now; }

DType tensor_parallel_wire() { return wire_now; }

TensorParallelWire::TensorParallelWire(DType wire) : previous_(wire_now) {
  check_wire_dtype(wire, "[tensor parallel] activations");
  wire_now = wire;
}

TensorParallelWire::~TensorParallelWire() { wire_now = previous_; }

std::pair<int64_t, int64_t> shard_range(int64_t size, int rank, int world) {
  TESSERA_CHECK(size >= 0 && world >= 1 && rank >= 0 && rank < world, "[shard_range] needs size >= 0 and 0 <= rank < "
                "world, got size ", size, ", rank ", rank, ", world ", world);
  return {size * rank / world, size * (rank + 1) / world};
}

std::vector<int64_t> shard_sizes(int64_t size, int world) {
  std::vector<int64_t> sizes;
  for (int r = 0; r < world; ++r) {
    auto [begin, end] = shard_range(size, r, world);
    sizes.push_back(end - begin);
  }
  return sizes;
}

Tensor copy_to_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group) {
  check_input(x, group, "copy_to_tensor_parallel_region");
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x.detach();  // the identity; the record below gives it its own node
  }
  const DType wire = wire_now;
  TensorParallelCommTally* tally = tally_now;
  return autograd::record(y, "CopyToTensorParallelRegionBackward", {x}, [group, wire, tally](const Tensor& grad) {
    return std::vector<Tensor>{summed_and_counted(grad, *group, wire, tally)};
  }, autograd::Saves::Nothing);
}

Tensor reduce_from_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group) {
  check_input(x, group, "reduce_from_tensor_parallel_region");
  return autograd::record(summed_and_counted(x, *group, wire_now, tally_now), "ReduceFromTensorParallelRegionBackward", {x},
                          [](const Tensor& grad) {
    return std::vector<Tensor>{grad};
  }, autograd::Saves::Nothing);
}

Tensor gather_from_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group) {
  check_input(x, group, "gather_from_tensor_parallel_region");
  check_last_dim(x, group, "gather_from_tensor_parallel_region");
  Tensor mine = from_vector(std::vector<int64_t>{x.shape().back()}, {1});
  Tensor all = zeros({group->size()}, DType::Int64);
  group->allgather(mine, all)->wait();
  return gather_from_tensor_parallel_region(x, group, all.to_vector<int64_t>());
}

Tensor gather_from_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group,
                                          const std::vector<int64_t>& last_dim_sizes) {
  check_input(x, group, "gather_from_tensor_parallel_region");
  check_last_dim(x, group, "gather_from_tensor_parallel_region");
  Tensor y = all_gather_last_dim(x, *group, last_dim_sizes);
  int64_t begin = 0;
  for (int r = 0; r < group->rank(); ++r) begin += last_dim_sizes[r];
  const int64_t end = begin + x.shape().back();
  return autograd::record(y, "GatherFromTensorParallelRegionBackward", {x}, [begin, end](const Tensor& grad) {
    return std::vector<Tensor>{last_dim_part(grad, begin, end)};
  }, autograd::Saves::Nothing);
}

Tensor scatter_to_tensor_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group) {
  check_input(x, group, "scatter_to_tensor_parallel_region");
  check_last_dim(x, group, "scatter_to_tensor_parallel_region");
  const int64_t n = x.shape().back();
  auto [begin, end] = shard_range(n, group->rank(), group->size());
  Tensor y = last_dim_part(x, begin, end);
  std::vector<int64_t> sizes = shard_sizes(n, group->size());
  return autograd::record(y, "ScatterToTensorParallelRegionBackward", {x}, [group, sizes](const Tensor& grad) {
    return std::vector<Tensor>{all_gather_last_dim(grad, *group, sizes)};
  }, autograd::Saves::Nothing);
}

}  // namespace tessera::parallel::tensor
