#include "tessera/parallel/tensor/vocab_parallel_cross_entropy.h"

#include <cmath>

#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::tensor {

Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& targets,
                                    const dist::ProcessGroupPtr& group) {
  constexpr const char* kOp = "[vocab_parallel_cross_entropy]";
  TESSERA_CHECK(group != nullptr, kOp, " needs a tensor-parallel process group, got null");
  TESSERA_CHECK(local_logits.defined() && local_logits.dtype() == DType::Float32 && local_logits.dim() == 2, kOp,
                " expected float32 local logits (N, V_local), got ",
                local_logits.defined() ? dtype_name(local_logits.dtype()) + std::string(" ") +
                                             shape_str(local_logits.shape()) : "an undefined tensor",
                " on rank ", group->rank());
  const int64_t N = local_logits.shape()[0], V = local_logits.shape()[1];
  TESSERA_CHECK(targets.defined() && targets.dtype() == DType::Int64 && targets.dim() == 1 && targets.shape()[0] == N,
                kOp, " expected int64 targets (", N, "), got ",
                targets.defined() ? dtype_name(targets.dtype()) + std::string(" ") + shape_str(targets.shape())
                                  : "an undefined tensor", " on rank ", group->rank());
  TESSERA_CHECK(N > 0, kOp, " needs at least one row, got local logits ", shape_str(local_logits.shape()));

  // Where this rank's columns lie in the full vocabulary.
  Tensor sizes = zeros({group->size()}, DType::Int64);
  group->allgather(from_vector(std::vector<int64_t>{V}, {1}), sizes)->wait();
  int64_t begin = 0, vocab = 0;
  const std::vector<int64_t> all = sizes.to_vector<int64_t>();
  for (int r = 0; r < group->size(); ++r) {
    if (r < group->rank()) begin += all[r];
    vocab += all[r];
  }
  Tensor logits = contiguous(local_logits.detach());
  Tensor target_values = clone(targets);  // the backward reads it; the caller may reuse its buffer
  const float* x = logits.data<float>();
  const int64_t* t = target_values.data<int64_t>();
  for (int64_t i = 0; i < N; ++i)
    TESSERA_CHECK(t[i] >= 0 && t[i] < vocab, kOp, " target ", t[i], " at row ", i, " is outside the vocabulary [0, ",
                  vocab, ")");

  Tensor row_max = full({N}, -INFINITY);  // (N), then the max over every rank's columns
  float* mx = row_max.data<float>();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < V; ++j) mx[i] = std::max(mx[i], x[i * V + j]);
  group->blocking_allreduce(row_max, dist::ReduceOp::Max);

  Tensor sums = zeros({2, N});  // row 0: Σ exp(x - max); row 1: the target's logit, on the rank that holds it
  float* se = sums.data<float>();
  float* tl = se + N;
  Tensor softmax = Tensor::empty({N, V});  // exp(x - max) now, divided by the global sum below
  float* p = softmax.data<float>();
  for (int64_t i = 0; i < N; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < V; ++j) acc += (p[i * V + j] = std::exp(x[i * V + j] - mx[i]));
    se[i] = static_cast<float>(acc);
    if (t[i] >= begin && t[i] < begin + V) tl[i] = x[i * V + (t[i] - begin)];
  }
  group->blocking_allreduce(sums, dist::ReduceOp::Sum);

  double loss = 0;
  for (int64_t i = 0; i < N; ++i) {
    loss += std::log(static_cast<double>(se[i])) + mx[i] - tl[i];
    const float inv = 1.0f / se[i];
    for (int64_t j = 0; j < V; ++j) p[i * V + j] *= inv;
  }
  Tensor result = scalar_tensor(static_cast<float>(loss / static_cast<double>(N)));
  return autograd::record(result, "VocabParallelCrossEntropyBackward", {local_logits},
                          [softmax, target_values, begin, N, V](const Tensor& grad) {
    const float scale = grad.item<float>() / static_cast<float>(N);
    Tensor g = Tensor::empty({N, V});
    const float* s = softmax.data<float>();
    const int64_t* tt = target_values.data<int64_t>();
    float* out = g.data<float>();
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < V; ++j) out[i * V + j] = s[i * V + j] * scale;
      if (tt[i] >= begin && tt[i] < begin + V) out[i * V + (tt[i] - begin)] -= scale;
    }
    return std::vector<Tensor>{g};
  }, autograd::Saves::Nothing);
}

}  // namespace tessera::parallel::tensor
