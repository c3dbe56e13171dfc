#include "tessera/data/sampler.h"

#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"

namespace tessera::data {

namespace {

// Uniform in [0, bound) without modulo bias: reject the top partial block of 2^64.
uint64_t bounded(Generator& gen, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t r;
  do r = gen.next_u64();
  while (r >= limit);
  return r % bound;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

}  // namespace

std::vector<int64_t> random_permutation(int64_t n, uint64_t generator_seed) {
  std::vector<int64_t> v = iota(n);
  Generator gen(generator_seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[bounded(gen, static_cast<uint64_t>(i) + 1)]);
  return v;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  TESSERA_CHECK(n >= 0, "[SequentialSampler] n must be >= 0, got ", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const { return iota(n_); }

RangeSampler::RangeSampler(int64_t begin, int64_t end) : begin_(begin), end_(end) {
  TESSERA_CHECK(0 <= begin && begin <= end, "[RangeSampler] needs 0 <= begin <= end, got [", begin, ", ", end, ")");
}

std::vector<int64_t> RangeSampler::indices(int64_t) const {
  std::vector<int64_t> v = iota(end_ - begin_);
  for (auto& i : v) i += begin_;
  return v;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  TESSERA_CHECK(n >= 0, "[RandomSampler] n must be >= 0, got ", n);
}

// The generator seed of (seed, epoch), shared by RandomSampler and DistributedSampler so that a
// distributed job's global order is the single-process one: with world size N and per-rank batch B,
// step s covers exactly the samples of the single-process batch s of size N·B.
namespace {
uint64_t epoch_seed(uint64_t seed, int64_t epoch) { return mix64(seed ^ mix64(static_cast<uint64_t>(epoch))); }
}  // namespace

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return random_permutation(n_, epoch_seed(seed_, epoch));
}

DistributedSampler::DistributedSampler(int64_t n, int rank, int world_size, bool shuffle, uint64_t seed, bool drop_last)
    : n_(n), rank_(rank), world_size_(world_size), shuffle_(shuffle), seed_(seed) {
  TESSERA_CHECK(n >= 0, "[DistributedSampler] n must be >= 0, got ", n);
  TESSERA_CHECK(world_size >= 1, "[DistributedSampler] world_size must be >= 1, got ", world_size);
  TESSERA_CHECK(rank >= 0 && rank < world_size, "[DistributedSampler] rank ", rank, " is outside [0, ", world_size,
                ") for world_size ", world_size);
  num_samples_ = drop_last ? n / world_size : (n + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all = shuffle_ ? random_permutation(n_, epoch_seed(seed_, epoch)) : iota(n_);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  // Position p of the padded (or truncated) list of total = num_samples * world entries is all[p % n]:
  // that is PyTorch's "indices += indices[:padding]" (repeated when padding > n) in one expression.
  for (int64_t k = 0; k < num_samples_; ++k) mine.push_back(all[static_cast<size_t>((rank_ + k * world_size_) % n_)]);
  return mine;
}

PaddedRandomSampler::PaddedRandomSampler(int64_t n, int64_t per_replica, uint64_t seed)
    : n_(n), per_replica_(per_replica), seed_(seed) {
  TESSERA_CHECK(n >= 0 && per_replica >= 0, "[PaddedRandomSampler] n ", n, " and per_replica ", per_replica,
                " must be >= 0");
  TESSERA_CHECK(n > 0 || per_replica == 0, "[PaddedRandomSampler] this replica's share holds no rows, and ",
                per_replica, " are asked of it: give the job fewer replicas or the table more rows");
}

std::vector<int64_t> PaddedRandomSampler::indices(int64_t epoch) const {
  const std::vector<int64_t> order = random_permutation(n_, epoch_seed(seed_, epoch));
  std::vector<int64_t> mine(static_cast<size_t>(per_replica_));
  for (int64_t k = 0; k < per_replica_; ++k) mine[static_cast<size_t>(k)] = order[static_cast<size_t>(k % n_)];
  return mine;
}

}  // namespace tessera::data
