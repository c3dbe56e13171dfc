#include "tessera/parallel/tensor/vocab_parallel_embedding.h"

#include <tuple>

#include "tessera/parallel/tensor/mappings.h"

namespace tessera::parallel::tensor {

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& full, dist::ProcessGroupPtr group)
    : vocab_size(full.weight.shape()[0]), embedding_dim(full.weight.shape()[1]), group_(std::move(group)) {
  TESSERA_CHECK(group_ != nullptr, "[VocabParallelEmbedding] needs a tensor-parallel process group, got null");
  TESSERA_CHECK(vocab_size >= group_->size(), "[VocabParallelEmbedding] a vocabulary of ", vocab_size,
                " rows cannot give each of ", group_->size(), " ranks at least one");
  std::tie(vocab_begin, vocab_end) = shard_range(vocab_size, group_->rank(), group_->size());
  weight = register_parameter("weight", take_shard(full.weight.detach(), shard_specs()[0].second, group_->rank(),
                                                   group_->size()));
}

std::vector<std::pair<std::string, ShardSpec>> VocabParallelEmbedding::shard_specs() const {
  return {{"weight", {0, vocab_size, 1}}};
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  TESSERA_CHECK(ids.defined() && ids.dtype() == DType::Int64, "[VocabParallelEmbedding] expected int64 ids, got ",
                ids.defined() ? dtype_name(ids.dtype()) : "an undefined tensor");
  Tensor flat = contiguous(ids);
  Tensor local = Tensor::empty(ids.shape(), DType::Int64);
  Shape mask_shape = ids.shape();
  mask_shape.push_back(1);
  Tensor mask = Tensor::empty(mask_shape);  // 1 where this rank holds the id, broadcast over D
  const int64_t* in = flat.data<int64_t>();
  int64_t* out = local.data<int64_t>();
  float* m = mask.data<float>();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    TESSERA_CHECK(in[i] >= 0 && in[i] < vocab_size, "[VocabParallelEmbedding] id ", in[i], " at position ", i,
                  " is outside the vocabulary [0, ", vocab_size, ")");
    const bool mine = in[i] >= vocab_begin && in[i] < vocab_end;
    out[i] = mine ? in[i] - vocab_begin : 0;  // any local row; the mask zeroes it
    m[i] = mine ? 1.0f : 0.0f;
  }
  return reduce_from_tensor_parallel_region(mul(embedding(weight, local), mask), group_);  // (..., D)
}

}  // namespace tessera::parallel::tensor
