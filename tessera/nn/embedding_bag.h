// EmbeddingBag (mode mean), the input layer of bag-of-words models: indices int64 (B, L) -> float32
// (B, dim), row b = mean over j of weight[indices[b, j]] (PyTorch's nn.EmbeddingBag(mode="mean") on
// equal-length bags).
//
// Sparse mode, for parameter-server training: a batch touches a few thousand of perhaps millions of
// rows, so a worker pulls just those rows and pushes just their gradients. With a row source set,
// forward() collects the sorted unique ids of the batch, asks source(ids) for their rows
// (ids.size(), dim), makes that a leaf that requires grad and computes the bags from it, the indices
// remapped to positions in ids. After backward, last_rows().grad() is the gradient of exactly the rows
// last_ids() names. `weight` is then not read (it stays registered, so parameters() and state_dict()
// are the same in both modes; the parameter-server code asks sparse() to know to skip it).
#pragma once
#include <functional>
#include <vector>

#include "tessera/nn/module.h"

namespace tessera::nn {

class EmbeddingBag : public Module {
 public:
  using RowSource = std::function<Tensor(const std::vector<int64_t>& sorted_unique_ids)>;

  EmbeddingBag(int64_t num_embeddings, int64_t dim);  // weight N(0, 1) as nn::Embedding
  Tensor forward(const Tensor& indices) override;      // (B, L) int64 -> (B, dim)
  std::string name() const override { return "EmbeddingBag"; }

  // An empty function returns to the local weight.
  void set_row_source(RowSource source);
  bool sparse() const { return static_cast<bool>(source_); }
  // The sorted unique ids of the last forward (both modes).
  const std::vector<int64_t>& last_ids() const { return last_ids_; }
  // Sparse mode: the (last_ids().size(), dim) leaf of the last forward; undefined in local mode.
  const Tensor& last_rows() const { return last_rows_; }

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t dim() const { return dim_; }

  Tensor weight;  // (num_embeddings, dim)

 private:
  int64_t num_embeddings_, dim_;
  RowSource source_;
  std::vector<int64_t> last_ids_;
  Tensor last_rows_;
};

}  // namespace tessera::nn
