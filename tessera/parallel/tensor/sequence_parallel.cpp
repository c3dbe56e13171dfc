#include "tessera/parallel/tensor/sequence_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "tessera/autograd/node.h"
#include "tessera/autograd/weight_grad_deferral.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/tensor/mappings.h"

namespace tessera::parallel::tensor {
namespace {

void check_sequence_input(const Tensor& x, const dist::ProcessGroupPtr& group, const char* op, const char* what) {
  TESSERA_CHECK(group != nullptr, "[", op, "] needs a tensor-parallel process group, got null");
  TESSERA_CHECK(x.defined() && x.dtype() == DType::Float32 && x.device().is_cpu() && x.dim() == 3, "[", op,
                "] expects ", what, " as a float32 CPU tensor (B, T, C), got ",
                x.defined() ? dtype_name(x.dtype()) + std::string(" ") + shape_str(x.shape()) + " on " +
                                  x.device().str()
                            : "an undefined tensor",
                " on rank ", group->rank());
}

// A batch of sequences of `length` tokens cut over a group's ranks: rank r holds tokens
// [r·local, (r+1)·local) of each, so its local row i (of B·local) is row full_row(r, i) of the
// whole (B·length) rows.
struct TokenCut {
  int64_t length = 0, local = 0;
  int64_t full_row(int rank, int64_t local_row) const {
    return (local_row / local) * length + rank * local + local_row % local;
  }
};

TokenCut cut_of_whole(int64_t length, const dist::ProcessGroup& group, const char* op) {
  TESSERA_CHECK(length % group.size() == 0, "[", op, "] a sequence of ", length, " tokens does not split evenly over ",
                "the ", group.size(), " ranks of the tensor-parallel group: with sequence parallelism the sequence "
                "length (model.context) must be a multiple of parallel.tp");
  return {length, length / group.size()};
}

// Chunk k of `rows` rows cut in `chunks` near-equal pieces (as a dimension is cut over ranks).
std::pair<int64_t, int64_t> chunk_of(int64_t rows, int64_t chunks, int64_t k) {
  return shard_range(rows, static_cast<int>(k), static_cast<int>(chunks));
}

// Rank q's local rows [k0, k0 + n) of a (B·T, width) matrix of whole sequences, to or from n
// contiguous rows.
void rows_to_whole(const float* rows, float* whole, int64_t width, const TokenCut& cut, int q, int64_t k0, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    std::memcpy(whole + cut.full_row(q, k0 + j) * width, rows + j * width, width * sizeof(float));
}

void whole_to_rows(const float* whole, float* rows, int64_t width, const TokenCut& cut, int q, int64_t k0, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    std::memcpy(rows + j * width, whole + cut.full_row(q, k0 + j) * width, width * sizeof(float));
}

// Adds the compute thread's time in `what` (issuing a collective, or waiting for one) to the tally.
// Both count: the group's worker runs above the compute threads, so a collective issued while the
// core is busy may run at once and hold the issuing thread off its core until it is done.
template <typename F>
void timed(TensorParallelCommTally* tally, F&& what) {
  const auto start = std::chrono::steady_clock::now();
  what();
  if (tally) tally->exposed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void count_call(TensorParallelCommTally* tally, int64_t bytes) {
  if (!tally) return;
  tally->bytes += bytes;
  tally->calls += 1;
}

int64_t usable_chunks(int64_t chunks, int64_t rows) { return std::clamp<int64_t>(chunks, 1, std::max<int64_t>(rows, 1)); }

// Where rank q's rows [k0, k0 + n) of chunk [k0, k1) lie in a gathered buffer: chunk after chunk,
// and in each chunk rank after rank, as the chunks' all-gathers deliver them.
int64_t gathered_row(int world, int q, int64_t k0, int64_t n) { return world * k0 + q * n; }

// An all-gather in chunks on its way: the (world·R, width) buffer in gathered_row's order and each
// chunk's operation.
// The values travel as `wire` (mixed precision's bfloat16 halves the bytes); the ops compute in float32.
Tensor on_wire(const Tensor& x, DType wire) { return x.dtype() == wire ? contiguous(x) : x.to(wire); }
Tensor as_float(const Tensor& x) { return x.dtype() == DType::Float32 ? x : x.to(DType::Float32); }

struct PendingGather {
  Tensor gathered;  // in the wire's type
  std::vector<dist::WorkPtr> works;
  int64_t rows = 0, chunks = 1;
};

// Queues the all-gathers of this rank's `rows` (R, width), chunk by chunk, as `wire`; with one
// chunk, waits.
PendingGather start_gather(const Tensor& rows, dist::ProcessGroup& group, int64_t chunks, DType wire,
                           TensorParallelCommTally* tally) {
  PendingGather p;
  p.rows = rows.shape()[0];
  p.chunks = usable_chunks(chunks, p.rows);
  const int world = group.size();
  const Tensor sent = on_wire(rows, wire);
  p.gathered = Tensor::empty({world * p.rows, rows.shape()[1]}, wire);
  for (int64_t k = 0; k < p.chunks; ++k) {
    auto [k0, k1] = chunk_of(p.rows, p.chunks, k);
    Tensor block = p.gathered.slice(0, world * k0, world * k1);
    timed(tally, [&] { p.works.push_back(group.allgather(sent.slice(0, k0, k1), block)); });
    count_call(tally, block.numel() * static_cast<int64_t>(dtype_size(block.dtype())));
  }
  if (p.chunks == 1) timed(tally, [&] { p.works[0]->wait(); });  // nothing overlaps
  return p;
}

void wait_chunk(const PendingGather& p, int64_t k, TensorParallelCommTally* tally) {
  timed(tally, [&] { p.works[k]->wait(); });
}

// All-gathers this rank's `rows` (R, width) in chunks, every chunk queued at once, as `wire`. mine()
// runs on this rank's rows, which need no communication, while the chunks travel; then theirs(q, k0,
// n, part) runs on each other rank q's rows [k0, k0 + n) of each chunk (float32) as it arrives, while
// the later chunks still travel. With one chunk nothing overlaps: the gather, then mine, then theirs.
void gather_in_chunks(const Tensor& rows, dist::ProcessGroup& group, int64_t chunks, DType wire,
                      TensorParallelCommTally* tally, const std::function<void()>& mine,
                      const std::function<void(int q, int64_t k0, int64_t n, const Tensor& part)>& theirs) {
  PendingGather p = start_gather(rows, group, chunks, wire, tally);
  const int world = group.size();
  mine();
  for (int64_t k = 0; k < p.chunks; ++k) {
    wait_chunk(p, k, tally);
    auto [k0, k1] = chunk_of(p.rows, p.chunks, k);
    const int64_t n = k1 - k0;
    for (int q = 0; q < world; ++q)
      if (q != group.rank())
        theirs(q, k0, n, as_float(p.gathered.slice(0, gathered_row(world, q, k0, n), gathered_row(world, q, k0, n) + n)));
  }
}

// Reduce-scatters partial sums over the ranks' rows, in chunks. theirs(q, k0, n) computes this
// rank's part (n, width) of rank q's rows [k0, k0 + n) for every other rank q; each chunk is queued
// as soon as it is computed (this rank's own slot zero), so chunk k travels while chunk k+1 is
// computed. mine() then computes this rank's part of its own rows (R, width), and `meanwhile` runs,
// while the last chunks travel; the result is what arrived plus mine (float32). The partial sums
// travel, and are summed, as `wire`. With one chunk nothing overlaps: everything is computed, then
// reduce-scattered.
Tensor reduce_scatter_in_chunks(int64_t R, int64_t width, dist::ProcessGroup& group, int64_t chunks, DType wire,
                                TensorParallelCommTally* tally, const std::function<Tensor(int q, int64_t k0, int64_t n)>& theirs,
                                const std::function<Tensor()>& mine, const std::function<void()>& meanwhile) {
  const int64_t K = usable_chunks(chunks, R);
  Tensor out = Tensor::empty({R, width}, wire);
  std::vector<dist::WorkPtr> works;  // (the group keeps each chunk's tensors until it has run)
  Tensor own;
  for (int64_t k = 0; k < K; ++k) {
    auto [k0, k1] = chunk_of(R, K, k);
    const int64_t n = k1 - k0;
    Tensor block = Tensor::empty({group.size() * n, width});
    float* b = block.data<float>();
    for (int q = 0; q < group.size(); ++q) {
      if (q == group.rank()) {
        std::fill_n(b + q * n * width, n * width, 0.0f);
      } else {
        const Tensor part = contiguous(theirs(q, k0, n));
        std::copy_n(part.data<float>(), n * width, b + q * n * width);
      }
    }
    if (K == 1) own = contiguous(mine());
    Tensor sent = on_wire(block, wire);
    timed(tally, [&] { works.push_back(group.reduce_scatter(sent, out.slice(0, k0, k1))); });
    count_call(tally, sent.numel() * static_cast<int64_t>(dtype_size(sent.dtype())));
  }
  if (K > 1) {
    own = contiguous(mine());
    if (meanwhile) meanwhile();
  }
  for (auto& work : works) timed(tally, [&] { work->wait(); });
  if (K == 1 && meanwhile) meanwhile();
  Tensor summed = as_float(out);
  float* o = summed.data<float>();
  const float* m = own.data<float>();
  for (int64_t i = 0; i < R * width; ++i) o[i] += m[i];
  return summed;
}

// Under a zero-bubble schedule's DeferWeightGrads scope (autograd/weight_grad_deferral.h), queues
// the weight (and bias) gradients for its W pass, as linear's are, and returns true: the backward
// then returns none for them. False where nothing defers them, and the caller computes them now.
bool deferred_to_w_pass(const Tensor& weight, const Tensor& bias,
                        std::function<std::pair<Tensor, Tensor>()> weight_grads) {
  autograd::WeightGradQueue* queue = autograd::deferred_weight_grads();
  if (queue == nullptr) return false;
  std::shared_ptr<autograd::Node> to_weight = autograd::deferrable_sink(weight);
  std::shared_ptr<autograd::Node> to_bias = bias.defined() ? autograd::deferrable_sink(bias) : nullptr;
  if (!to_weight || (bias.defined() && !to_bias)) return false;
  queue->push([to_weight, to_bias, weight_grads = std::move(weight_grads)] {
    auto [grad_w, grad_b] = weight_grads();
    to_weight->apply(grad_w);
    if (to_bias) to_bias->apply(grad_b);
  });
  return true;
}

}  // namespace

Tensor scatter_to_sequence_parallel_region(const Tensor& x, const dist::ProcessGroupPtr& group) {
  check_sequence_input(x, group, "scatter_to_sequence_parallel_region", "the whole sequence");
  const int64_t B = x.shape()[0], C = x.shape()[2];
  const TokenCut cut = cut_of_whole(x.shape()[1], *group, "scatter_to_sequence_parallel_region");
  const int rank = group->rank();
  Tensor mine;
  {
    NoGradGuard no_grad;
    mine = contiguous(x.slice(1, rank * cut.local, (rank + 1) * cut.local));
  }
  TensorParallelCommTally* tally = tensor_parallel_tally();
  const DType wire = tensor_parallel_wire();
  return autograd::record(mine, "ScatterToSequenceParallelRegionBackward", {x}, [group, cut, B, C, tally, wire](const Tensor& g) {
    NoGradGuard no_grad;
    Tensor whole = Tensor::empty({B, cut.length, C});
    const Tensor rows = contiguous(g).view({B * cut.local, C});
    const int rank = group->rank();
    gather_in_chunks(rows, *group, 1, wire, tally, [&] {
      rows_to_whole(rows.data<float>(), whole.data<float>(), C, cut, rank, 0, B * cut.local);
    }, [&](int q, int64_t k0, int64_t n, const Tensor& part) {
      rows_to_whole(part.data<float>(), whole.data<float>(), C, cut, q, k0, n);
    });
    return std::vector<Tensor>{whole};
  }, autograd::Saves::Nothing);
}

Tensor all_gather_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const dist::ProcessGroupPtr& group,
                         int64_t chunks) {
  check_sequence_input(x, group, "all_gather_linear", "this rank's tokens");
  const int64_t B = x.shape()[0], C = x.shape()[2], N = weight.shape()[0];
  TESSERA_CHECK(weight.dim() == 2 && weight.shape()[1] == C, "[all_gather_linear] weight ", shape_str(weight.shape()),
                " does not take inputs of ", C, " features");
  const TokenCut cut = cut_of_whole(x.shape()[1] * group->size(), *group, "all_gather_linear");
  TensorParallelCommTally* tally = tensor_parallel_tally();
  const DType wire = tensor_parallel_wire();
  Tensor out = Tensor::empty({B, cut.length, N});
  Tensor rows;  // this rank's tokens, kept: the backward gathers them again for the weight's gradient
  {
    NoGradGuard no_grad;
    rows = contiguous(x).view({B * cut.local, C});
    // Each rank's rows of the output, in the whole sequence's order.
    auto place = [&](int q, int64_t k0, int64_t n, const Tensor& input) {
      const Tensor y = contiguous(linear(input, weight, bias));  // (n, N)
      rows_to_whole(y.data<float>(), out.data<float>(), N, cut, q, k0, n);
    };
    gather_in_chunks(rows, *group, chunks, wire, tally, [&] { place(group->rank(), 0, B * cut.local, rows); }, place);
  }
  return autograd::record(out, "AllGatherLinearBackward", {x, weight, bias},
                          [group, chunks, tally, wire, cut, B, C, N, rows, weight, bias](const Tensor& g) {
    NoGradGuard no_grad;
    // The whole input again, for the weight's gradient: keeping only this rank's tokens between the
    // passes is what saves the memory (Korthikanti et al. §4.2.2); the gather travels while the
    // input gradient is computed.
    PendingGather input = start_gather(rows, *group, chunks, wire, tally);
    const Tensor dy = contiguous(g).view({B * cut.length, N});
    const int64_t R = B * cut.local, K = usable_chunks(chunks, R);
    const int world = group->size(), rank = group->rank();
    // The output gradient in the order of the gathered input: dW = Σ_rows dyᵀ·x takes any common order.
    Tensor dy_gathered = Tensor::empty({world * R, N});
    for (int64_t k = 0; k < K; ++k) {
      auto [k0, k1] = chunk_of(R, K, k);
      for (int q = 0; q < world; ++q)
        whole_to_rows(dy.data<float>(), dy_gathered.data<float>() + gathered_row(world, q, k0, k1 - k0) * N, N, cut, q,
                      k0, k1 - k0);
    }
    auto rows_of = [&](int q, int64_t k0, int64_t n) {
      const int64_t at = gathered_row(world, q, k0, n);
      return dy_gathered.slice(0, at, at + n);
    };
    auto weight_grads = [input, dy_gathered, dy, tally, has_bias = bias.defined()] {
      for (int64_t k = 0; k < input.chunks; ++k) wait_chunk(input, k, tally);
      return std::pair{matmul(transpose(dy_gathered, 0, 1), as_float(input.gathered)), has_bias ? sum(dy, Shape{0}) : Tensor()};
    };
    const bool deferred = deferred_to_w_pass(weight, bias, weight_grads);
    Tensor dw, db;
    Tensor dx = reduce_scatter_in_chunks(R, C, *group, chunks, wire, tally, [&](int q, int64_t k0, int64_t n) {
      return matmul(rows_of(q, k0, n), weight);  // (n, C): this rank's part of rank q's input gradient
    }, [&] {
      Tensor own = Tensor::empty({R, C});
      for (int64_t k = 0; k < K; ++k) {
        auto [k0, k1] = chunk_of(R, K, k);
        Tensor own_rows = own.slice(0, k0, k1);
        copy_(own_rows, matmul(rows_of(rank, k0, k1 - k0), weight));
      }
      return own;
    }, [&] {
      if (!deferred) std::tie(dw, db) = weight_grads();
    });
    return std::vector<Tensor>{dx.view({B, cut.local, C}), dw, db};
  });
}

Tensor linear_reduce_scatter(const Tensor& x, const Tensor& weight, const dist::ProcessGroupPtr& group, int64_t chunks) {
  check_sequence_input(x, group, "linear_reduce_scatter", "the whole sequence");
  const int64_t B = x.shape()[0], in = x.shape()[2], C = weight.shape()[0];
  TESSERA_CHECK(weight.dim() == 2 && weight.shape()[1] == in, "[linear_reduce_scatter] weight ",
                shape_str(weight.shape()), " does not take inputs of ", in, " features");
  const TokenCut cut = cut_of_whole(x.shape()[1], *group, "linear_reduce_scatter");
  TensorParallelCommTally* tally = tensor_parallel_tally();
  const DType wire = tensor_parallel_wire();
  Tensor whole_x, out;
  {
    NoGradGuard no_grad;
    whole_x = contiguous(x).view({B * cut.length, in});
    // This rank's part of the output of rank q's rows: its input features of those rows, projected.
    auto part = [&](int q, int64_t k0, int64_t n) {
      Tensor x_rows = Tensor::empty({n, in});
      whole_to_rows(whole_x.data<float>(), x_rows.data<float>(), in, cut, q, k0, n);
      return linear(x_rows, weight, Tensor());  // (n, C)
    };
    out = reduce_scatter_in_chunks(B * cut.local, C, *group, chunks, wire, tally, part,
                                   [&] { return part(group->rank(), 0, B * cut.local); }, {})
              .view({B, cut.local, C});
  }
  return autograd::record(out, "LinearReduceScatterBackward", {x, weight},
                          [group, chunks, tally, wire, cut, B, in, C, whole_x, weight](const Tensor& g) {
    NoGradGuard no_grad;
    Tensor dx = Tensor::empty({B * cut.length, in});
    Tensor dy = Tensor::empty({B * cut.length, C});  // the gathered output gradient, for the weight's
    const Tensor rows = contiguous(g).view({B * cut.local, C});
    // Each rank's rows of the gathered output gradient and of the input gradient.
    auto place = [&](int q, int64_t k0, int64_t n, const Tensor& dy_rows) {
      rows_to_whole(dy_rows.data<float>(), dy.data<float>(), C, cut, q, k0, n);
      const Tensor d = contiguous(matmul(dy_rows, weight));  // (n, in)
      rows_to_whole(d.data<float>(), dx.data<float>(), in, cut, q, k0, n);
    };
    gather_in_chunks(rows, *group, chunks, wire, tally, [&] { place(group->rank(), 0, B * cut.local, rows); }, place);
    auto weight_grads = [dy, whole_x] { return std::pair{matmul(transpose(dy, 0, 1), whole_x), Tensor()}; };
    const Tensor dw = deferred_to_w_pass(weight, Tensor(), weight_grads) ? Tensor() : weight_grads().first;
    return std::vector<Tensor>{dx.view({B, cut.length, in}), dw};
  });
}

Tensor sequence_parallel_dropout(const Tensor& x, float p, bool training, const dist::ProcessGroupPtr& group) {
  check_sequence_input(x, group, "sequence_parallel_dropout", "this rank's tokens");
  if (!training || p == 0.0f) return x;
  const int64_t local = x.shape()[1], rank = group->rank();
  Tensor mask;
  {
    NoGradGuard no_grad;
    const Tensor whole = dropout(ones({x.shape()[0], local * group->size(), x.shape()[2]}), p, true);
    mask = contiguous(whole.slice(1, rank * local, (rank + 1) * local));
  }
  return mul(x, mask);
}

Tensor dropout_of(nn::Dropout& drop, const Tensor& y, const SequenceParallel& sequence,
                  const dist::ProcessGroupPtr& group) {
  return sequence.enabled ? sequence_parallel_dropout(y, drop.p, drop.is_training(), group) : drop.forward(y);
}

void sum_partial_gradients(const std::vector<Tensor>& parameters, dist::ProcessGroup& group) {
  if (parameters.empty() || group.size() == 1) return;
  int64_t total = 0;
  for (const Tensor& p : parameters) total += p.numel();
  Tensor flat = Tensor::empty({total});
  float* f = flat.data<float>();
  for (const Tensor& p : parameters) {
    Tensor g = p.grad();
    if (!g.defined()) {
      std::fill_n(f, p.numel(), 0.0f);
    } else {
      const Tensor c = contiguous(g);
      std::copy_n(c.data<float>(), c.numel(), f);
    }
    f += p.numel();
  }
  group.blocking_allreduce(flat, dist::ReduceOp::Sum);
  int64_t at = 0;
  for (Tensor p : parameters) {  // in place where a contiguous gradient exists (it may be a bucket's slot)
    Tensor g = p.grad();
    if (!g.defined() || !g.is_contiguous()) p.set_grad(g = Tensor::empty(p.shape()));
    std::copy_n(flat.data<float>() + at, p.numel(), g.data<float>());
    at += p.numel();
  }
}

}  // namespace tessera::parallel::tensor
