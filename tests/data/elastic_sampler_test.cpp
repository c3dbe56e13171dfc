// An epoch interrupted at world size N and continued at world size M (the elastic case): with the
// global batch G kept, step s reads positions [s·G, (s+1)·G) of the epoch's global order at every
// world size, so resuming at global batch b with the new world's DistributedSampler neither skips
// nor repeats a sample. This is what Trainer::resume relies on (tessera.samples_in_epoch).
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "tessera/data/sampler.h"

namespace tessera::data {
namespace {

// The samples every rank of a `world`-rank job reads in global batches [first, last) of `epoch`, as
// the Trainer's loader reads them (drop_last sampler, drop_last batches of G / world per rank).
std::vector<int64_t> samples_read(int64_t n, int world, int64_t global_batch, int64_t epoch, int64_t first,
                                  int64_t last, uint64_t seed) {
  const int64_t per_rank = global_batch / world;
  std::vector<int64_t> out;
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> mine = DistributedSampler(n, r, world, true, seed, true).indices(epoch);
    const int64_t batches = static_cast<int64_t>(mine.size()) / per_rank;
    for (int64_t b = first; b < std::min(last, batches); ++b)
      out.insert(out.end(), mine.begin() + b * per_rank, mine.begin() + (b + 1) * per_rank);
  }
  return out;
}

class ElasticEpoch : public ::testing::TestWithParam<std::tuple<int, int, int64_t>> {};

TEST_P(ElasticEpoch, InterruptedAtNContinuedAtMReadsEverySampleOnce) {
  const auto [from, to, n] = GetParam();
  const int64_t global_batch = 12;  // divisible by 1, 2, 3 and 4
  const int64_t batches = n / global_batch;
  const uint64_t seed = 7;
  for (int64_t epoch : {0, 3})
    for (int64_t stop : {int64_t{0}, int64_t{1}, batches / 2, batches - 1, batches}) {
      std::vector<int64_t> seen = samples_read(n, from, global_batch, epoch, 0, stop, seed);
      std::vector<int64_t> rest = samples_read(n, to, global_batch, epoch, stop, batches, seed);
      seen.insert(seen.end(), rest.begin(), rest.end());
      // The uninterrupted single-process epoch reads the same set: the first batches·G positions.
      std::vector<int64_t> expected = samples_read(n, 1, global_batch, epoch, 0, batches, seed);
      std::sort(seen.begin(), seen.end());
      std::sort(expected.begin(), expected.end());
      ASSERT_EQ(seen, expected) << from << " -> " << to << " ranks, stopped after global batch " << stop
                                << " of epoch " << epoch;
      ASSERT_TRUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end()) << "a sample was read twice";
      if (n % global_batch == 0) {  // then the epoch is exactly the dataset, once
        ASSERT_EQ(static_cast<int64_t>(seen.size()), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], i);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ElasticEpoch,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(int64_t{120}, int64_t{131})));

}  // namespace
}  // namespace tessera::data
