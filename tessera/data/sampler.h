// Samplers: the order in which a DataLoader visits a dataset, as a function of the epoch only, so a
// resumed run (which knows its epoch) replays exactly the order of an uninterrupted one.
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The sample indices of `epoch`, in visiting order; always size() of them.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  virtual int64_t size() const = 0;
};

// 0, 1, ..., n-1 every epoch (evaluation).
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// begin, begin+1, ..., end-1 every epoch: a rank's contiguous shard of an evaluation set, so that
// the shards of all ranks cover every sample exactly once.
class RangeSampler : public Sampler {
 public:
  RangeSampler(int64_t begin, int64_t end);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return end_ - begin_; }

 private:
  int64_t begin_, end_;
};

// A fresh permutation of 0..n-1 each epoch: Fisher-Yates driven by a tessera::Generator seeded with a
// mix of (seed, epoch), so every epoch differs and each is reproducible on its own.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

// This rank's share of the dataset, with PyTorch's DistributedSampler semantics:
//   num_samples = drop_last ? floor(n / world) : ceil(n / world);  total = num_samples * world;
//   the epoch's list (a permutation seeded with seed + epoch, identical on every rank; or 0..n-1) is
//   padded by repeating from its start up to total, or truncated to total with drop_last;
//   rank r takes list[r], list[r + world], list[r + 2 world], ...
// So every rank gets the same number of samples (collectives stay in step) and together they cover
// every index (padding repeats a few).
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int rank, int world_size, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return num_samples_; }

 private:
  int64_t n_;
  int rank_, world_size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t num_samples_;
};

// A replica's own rows (a PartitionedDataset's share) in a fresh random order each epoch, padded
// to `per_replica` entries by repeating the order from its start: the shares of a table split by
// bytes differ by a few rows, and every replica must take the same number of steps.
class PaddedRandomSampler : public Sampler {
 public:
  PaddedRandomSampler(int64_t n, int64_t per_replica, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return per_replica_; }

 private:
  int64_t n_, per_replica_;
  uint64_t seed_;
};

// A uniformly random permutation of 0..n-1 (Fisher-Yates with unbiased bounded draws) from a
// tessera::Generator seeded with `generator_seed`. (Not in a data::detail namespace: that would hide
// tessera::detail::concat from every file in tessera::data.)
std::vector<int64_t> random_permutation(int64_t n, uint64_t generator_seed);

}  // namespace tessera::data
