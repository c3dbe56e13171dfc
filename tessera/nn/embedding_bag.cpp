#include "tessera/nn/embedding_bag.h"

#include <algorithm>

#include "tessera/nn/init.h"
#include "tessera/ops/ops.h"

namespace tessera::nn {

namespace {

// Checks (B, L) int64 ids in [0, bound); returns them sorted and unique. A sort over the B·L ids of the
// batch, not a map over the vocabulary: the vocabulary may be millions of rows, a batch a few thousand.
std::vector<int64_t> sorted_unique_ids(const Tensor& indices, int64_t bound) {
  TESSERA_CHECK(indices.defined(), "[EmbeddingBag] indices is an undefined tensor");
  TESSERA_CHECK(indices.dtype() == DType::Int64 && indices.dim() == 2,
                "[EmbeddingBag] indices must be an int64 (batch, bag_length) tensor, got ",
                dtype_name(indices.dtype()), " ", shape_str(indices.shape()));
  TESSERA_CHECK(indices.shape()[1] > 0, "[EmbeddingBag] bags must not be empty (the mean of none is undefined), got ",
                shape_str(indices.shape()));
  std::vector<int64_t> ids = indices.to_vector<int64_t>();
  const int64_t length = indices.shape()[1];
  for (size_t i = 0; i < ids.size(); ++i)
    TESSERA_CHECK_INDEX(ids[i] >= 0 && ids[i] < bound, "[EmbeddingBag] id ", ids[i], " at indices[",
                        static_cast<int64_t>(i) / length, ", ", static_cast<int64_t>(i) % length, "] (shape ",
                        shape_str(indices.shape()), ") is out of range: num_embeddings is ", bound, ", so ids must be in [0, ", bound, ")");
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// indices with each id replaced by its position in the sorted `ids` (which holds every one of them).
Tensor remap(const Tensor& indices, const std::vector<int64_t>& ids) {
  std::vector<int64_t> positions = indices.to_vector<int64_t>();
  for (int64_t& p : positions) p = std::lower_bound(ids.begin(), ids.end(), p) - ids.begin();
  return from_vector(positions, indices.shape());
}

}  // namespace

EmbeddingBag::EmbeddingBag(int64_t num_embeddings, int64_t dim) : num_embeddings_(num_embeddings), dim_(dim) {
  TESSERA_CHECK(num_embeddings > 0 && dim > 0, "[EmbeddingBag] sizes must be positive, got ", num_embeddings, "x",
                dim);
  weight = register_parameter("weight", init::normal({num_embeddings, dim}));
}

void EmbeddingBag::set_row_source(RowSource source) {
  source_ = std::move(source);
  last_rows_ = Tensor();
}

Tensor EmbeddingBag::forward(const Tensor& indices) {
  last_ids_ = sorted_unique_ids(indices, num_embeddings_);
  if (!sparse()) {
    last_rows_ = Tensor();
    return mean(embedding(weight, indices), {1});  // (B, L, dim) -> (B, dim)
  }
  Tensor rows = source_(last_ids_);
  const int64_t unique = static_cast<int64_t>(last_ids_.size());
  TESSERA_CHECK(rows.defined() && rows.dtype() == DType::Float32 && rows.shape() == (Shape{unique, dim_}),
                "[EmbeddingBag] the row source must return float32 ", shape_str({unique, dim_}), " for ", unique,
                " ids, got ", rows.defined() ? dtype_name(rows.dtype()) + std::string(" ") + shape_str(rows.shape())
                                             : std::string("an undefined tensor"));
  // detach: the rows' history (if the source computed them) stays out of this graph; the gradient
  // stops at this leaf, where the worker reads it.
  last_rows_ = rows.detach();
  last_rows_.set_requires_grad(true);
  return mean(embedding(last_rows_, remap(indices, last_ids_)), {1});
}

}  // namespace tessera::nn
