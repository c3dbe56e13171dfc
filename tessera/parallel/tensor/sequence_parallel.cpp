#include "tessera/parallel/tensor/sequence_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::tensor {
namespace {

thread_local SequenceCommTally* tally_now = nullptr;

void check_sequence_input(const Tensor& x, const dist::ProcessGroupPtr& group, const char* op, const char* what) {
  TESSERA_CHECK(group != nullptr, "[", op, "] needs a tensor-parallel process group, got null");
  TESSERA_CHECK(x.defined() && x.dtype() == DType::Float32 && x.device().is_cpu() && x.dim() == 3, "[", op,
                "] expects ", what, " as a float32 CPU tensor (B, T, C), got ",
                x.defined() ? dtype_name(x.dtype()) + std::string(" ") + shape_str(x.shape()) + " on " +
                                  x.device().str()
                            : "an undefined tensor",
                " on rank ", group->rank());
}

// A batch of sequences of `length` tokens cut over `world` ranks: rank r holds tokens
// [r·local, (r+1)·local) of each, so its local row i (of B·local) is row full_row(r, i) of the
// whole (B·length) rows.
struct TokenCut {
  int64_t length = 0, world = 1, local = 0;
  int64_t full_row(int rank, int64_t local_row) const {
    return (local_row / local) * length + rank * local + local_row % local;
  }
};

TokenCut cut_of_whole(int64_t length, const dist::ProcessGroup& group, const char* op) {
  TESSERA_CHECK(length % group.size() == 0, "[", op, "] a sequence of ", length, " tokens does not split evenly over ",
                "the ", group.size(), " ranks of the tensor-parallel group: with sequence parallelism the sequence "
                "length (model.context) must be a multiple of parallel.tp");
  return {length, group.size(), length / group.size()};
}

// Chunk k of `rows` rows cut in `chunks` near-equal pieces.
std::pair<int64_t, int64_t> chunk_of(int64_t rows, int64_t chunks, int64_t k) {
  return {rows * k / chunks, rows * (k + 1) / chunks};
}

// A block holds every rank's local rows [k0, k0 + n), rank after rank, (world·n, width): what an
// all-gather of one chunk delivers and what a reduce-scatter of one chunk takes.
void block_to_whole(const float* block, float* whole, int64_t width, const TokenCut& cut, int64_t k0, int64_t n) {
  for (int r = 0; r < cut.world; ++r)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(whole + cut.full_row(r, k0 + j) * width, block + (r * n + j) * width, width * sizeof(float));
}

void whole_to_block(const float* whole, float* block, int64_t width, const TokenCut& cut, int64_t k0, int64_t n) {
  for (int r = 0; r < cut.world; ++r)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(block + (r * n + j) * width, whole + cut.full_row(r, k0 + j) * width, width * sizeof(float));
}

void wait_counted(const dist::WorkPtr& work, SequenceCommTally* tally) {
  const auto start = std::chrono::steady_clock::now();
  work->wait();
  if (tally) tally->exposed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void count_call(SequenceCommTally* tally, int64_t bytes) {
  if (!tally) return;
  tally->bytes += bytes;
  tally->calls += 1;
}

// All-gathers `rows` (R, width), this rank's rows, in chunks: every chunk is queued at once, and
// use(k0, n, block) runs on each chunk's (world·n, width) block as soon as it has arrived, while the
// later chunks are still travelling.
void gather_in_chunks(const Tensor& rows, dist::ProcessGroup& group, int64_t chunks, SequenceCommTally* tally,
                      const std::function<void(int64_t k0, int64_t n, const Tensor& block)>& use) {
  const int64_t R = rows.shape()[0], width = rows.shape()[1];
  const int64_t K = std::clamp<int64_t>(chunks, 1, std::max<int64_t>(R, 1));
  std::vector<Tensor> blocks;
  std::vector<dist::WorkPtr> works;
  for (int64_t k = 0; k < K; ++k) {
    auto [k0, k1] = chunk_of(R, K, k);
    blocks.push_back(Tensor::empty({group.size() * (k1 - k0), width}));
    works.push_back(group.allgather(rows.slice(0, k0, k1), blocks.back()));
    count_call(tally, blocks.back().numel() * static_cast<int64_t>(sizeof(float)));
  }
  for (int64_t k = 0; k < K; ++k) {
    wait_counted(works[k], tally);
    auto [k0, k1] = chunk_of(R, K, k);
    use(k0, k1 - k0, blocks[k]);
  }
}

// Reduce-scatters, in chunks, blocks of (world·n, width) that produce(k0, n) computes: chunk k's
// reduce-scatter travels while chunk k+1's block is computed, and `meanwhile` runs while the last
// travels. Returns this rank's rows (R, width), summed over the group.
Tensor reduce_scatter_in_chunks(int64_t R, int64_t width, dist::ProcessGroup& group, int64_t chunks,
                                SequenceCommTally* tally, const std::function<Tensor(int64_t k0, int64_t n)>& produce,
                                const std::function<void()>& meanwhile) {
  const int64_t K = std::clamp<int64_t>(chunks, 1, std::max<int64_t>(R, 1));
  Tensor out = Tensor::empty({R, width});
  std::vector<dist::WorkPtr> works;
  for (int64_t k = 0; k < K; ++k) {
    auto [k0, k1] = chunk_of(R, K, k);
    Tensor block = contiguous(produce(k0, k1 - k0));
    works.push_back(group.reduce_scatter(block, out.slice(0, k0, k1)));
    count_call(tally, block.numel() * static_cast<int64_t>(sizeof(float)));
  }
  if (meanwhile) meanwhile();
  for (auto& work : works) wait_counted(work, tally);
  return out;
}

}  // namespace

SequenceCommTallyScope::SequenceCommTallyScope(SequenceCommTally* tally) : previous_(tally_now) { tally_now = tally; }

SequenceCommTallyScope::~SequenceCommTallyScope() { tally_now = previous_; }

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
  SequenceCommTally* tally = tally_now;
  return autograd::record(mine, "ScatterToSequenceParallelRegionBackward", {x}, [group, cut, B, C, tally](const Tensor& g) {
    NoGradGuard no_grad;
    Tensor whole = Tensor::empty({B, cut.length, C});
    gather_in_chunks(contiguous(g).view({B * cut.local, C}), *group, 1, tally,
                     [&](int64_t k0, int64_t n, const Tensor& block) {
                       block_to_whole(block.data<float>(), whole.data<float>(), C, cut, k0, n);
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
  SequenceCommTally* tally = tally_now;
  Tensor out = Tensor::empty({B, cut.length, N});
  Tensor whole_x = Tensor::empty({B * cut.length, C});  // the gathered input, for the weight's gradient
  {
    NoGradGuard no_grad;
    gather_in_chunks(contiguous(x).view({B * cut.local, C}), *group, chunks, tally,
                     [&](int64_t k0, int64_t n, const Tensor& block) {
                       block_to_whole(block.data<float>(), whole_x.data<float>(), C, cut, k0, n);
                       const Tensor y = contiguous(linear(block, weight, bias));  // (world·n, N)
                       block_to_whole(y.data<float>(), out.data<float>(), N, cut, k0, n);
                     });
  }
  const bool has_bias = bias.defined();
  return autograd::record(out, "AllGatherLinearBackward", {x, weight, bias},
                          [group, chunks, tally, cut, B, C, N, whole_x, weight, has_bias](const Tensor& g) {
    NoGradGuard no_grad;
    const Tensor dy = contiguous(g).view({B * cut.length, N});
    Tensor dw, db;
    Tensor dx = reduce_scatter_in_chunks(B * cut.local, C, *group, chunks, tally, [&](int64_t k0, int64_t n) {
      Tensor block = Tensor::empty({group->size() * n, N});
      whole_to_block(dy.data<float>(), block.data<float>(), N, cut, k0, n);
      return matmul(block, weight);  // (world·n, C), this rank's part of the sum
    }, [&] {
      dw = matmul(transpose(dy, 0, 1), whole_x);
      if (has_bias) db = sum(dy, Shape{0});
    });
    return std::vector<Tensor>{dx.view({B, cut.local, C}), dw, db};
  }, autograd::Saves::Nothing);
}

Tensor linear_reduce_scatter(const Tensor& x, const Tensor& weight, const dist::ProcessGroupPtr& group, int64_t chunks) {
  check_sequence_input(x, group, "linear_reduce_scatter", "the whole sequence");
  const int64_t B = x.shape()[0], K = x.shape()[2], C = weight.shape()[0];
  TESSERA_CHECK(weight.dim() == 2 && weight.shape()[1] == K, "[linear_reduce_scatter] weight ",
                shape_str(weight.shape()), " does not take inputs of ", K, " features");
  const TokenCut cut = cut_of_whole(x.shape()[1], *group, "linear_reduce_scatter");
  SequenceCommTally* tally = tally_now;
  Tensor whole_x, out;
  {
    NoGradGuard no_grad;
    whole_x = contiguous(x).view({B * cut.length, K});
    out = reduce_scatter_in_chunks(B * cut.local, C, *group, chunks, tally, [&](int64_t k0, int64_t n) {
      Tensor block = Tensor::empty({group->size() * n, K});
      whole_to_block(whole_x.data<float>(), block.data<float>(), K, cut, k0, n);
      return linear(block, weight, Tensor());  // (world·n, C), this rank's part of the sum
    }, {}).view({B, cut.local, C});
  }
  return autograd::record(out, "LinearReduceScatterBackward", {x, weight},
                          [group, chunks, tally, cut, B, K, C, whole_x, weight](const Tensor& g) {
    NoGradGuard no_grad;
    Tensor dx = Tensor::empty({B * cut.length, K});
    Tensor dy = Tensor::empty({B * cut.length, C});  // the gathered output gradient, for the weight's
    gather_in_chunks(contiguous(g).view({B * cut.local, C}), *group, chunks, tally,
                     [&](int64_t k0, int64_t n, const Tensor& block) {
                       block_to_whole(block.data<float>(), dy.data<float>(), C, cut, k0, n);
                       const Tensor d = contiguous(matmul(block, weight));  // (world·n, K)
                       block_to_whole(d.data<float>(), dx.data<float>(), K, cut, k0, n);
                     });
    Tensor dw = matmul(transpose(dy, 0, 1), whole_x);
    return std::vector<Tensor>{dx.view({B, cut.length, K}), dw};
  }, autograd::Saves::Nothing);
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
  for (Tensor p : parameters) {
    p.set_grad(clone(flat.slice(0, at, at + p.numel()).view(p.shape())));
    at += p.numel();
  }
}

}  // namespace tessera::parallel::tensor
