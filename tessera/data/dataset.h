// Datasets: a fixed number of samples that can be assembled into batches. Batches are assembled
// whole (not sample by sample, then stacked) so that a batch is one allocation and one memcpy per
// sample, on the data loader's background thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::data {

struct Batch {
  Tensor inputs;
  Tensor targets;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Assembles the samples at `indices` into one batch (first dim = indices.size()); an index outside
  // [0, size()) is an IndexError. Runs on the loader's thread, concurrently with training, so it must
  // not use the intra-op thread pool (OpenMP would then oversubscribe the cores): plain loops/memcpy.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
  // Whether each replica reads only its own part of this dataset (PartitionedDataset); the others
  // hold every sample, and a sampler picks each replica's.
  virtual bool reads_one_share() const { return false; }
  virtual void select_share(int /*index*/, int /*count*/) {
    throw NotSupportedError("[Dataset::select_share] this dataset holds every sample; a sampler shares it out");
  }
};

// A dataset each replica reads only its own part of (a table larger than memory, split by bytes):
// select_share(replica, replicas) before the first size() or get_batch, which then see that part
// only. Shares differ in size; the trainer pads the smaller ones (PaddedRandomSampler) so that every
// replica takes the same number of steps.
class PartitionedDataset : public Dataset {
 public:
  bool reads_one_share() const override { return true; }
  void select_share(int index, int count) override = 0;
};

// Row i of `inputs` and of `targets` is sample i. Both are stored contiguous and detached (a copy
// only when they are not already); any dtype; the same first dim (ValueError otherwise).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return size_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_, targets_;
  int64_t size_;
};

// Fashion-MNIST (or MNIST, same files) from `dir`: split "train" (train-*) or "test" (t10k-*), each
// file gzipped or not. Images float32 (N, 1, 28, 28), scaled to [0, 1] and normalised with the
// training set's mean 0.2860 and std 0.3530; labels int64 (N). A missing file is an IoError that
// names it and says how to install it.
constexpr float kFashionMnistMean = 0.2860f, kFashionMnistStd = 0.3530f;
std::shared_ptr<TensorDataset> load_fashion_mnist(const std::string& dir, const std::string& split);

// A learnable synthetic classification set for tests, shape (n, sample_shape...) float32 and (n) int64.
// Each input is N(0, 1) noise around one of `classes` random centres mu_c (about 4 apart), and its
// label is argmax_c (mu_c . x - |mu_c|^2 / 2): a fixed random affine map of the input (the Bayes
// classifier of the mixture), so a linear model can fit it exactly. Pure N(0, 1) inputs labelled by a
// random map would be fittable but not learnable from few samples: with 512 samples of 784 features
// a held-out accuracy of ~40% for 4 classes; the centres make it ~83% (an MLP, 3 epochs).
// The centres depend on `seed` only, the samples on `seed` and `stream`: a train set (stream 0) and a
// test set (stream 1) with one seed are one task with different samples.
std::shared_ptr<TensorDataset> make_synthetic_classification(int64_t n, const Shape& sample_shape, int64_t classes,
                                                             uint64_t seed, uint64_t stream = 0);

}  // namespace tessera::data
