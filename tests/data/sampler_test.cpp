// Samplers: permutations, determinism per (seed, epoch), and DistributedSampler against PyTorch's
// formula (num_samples, padding from the start, rank-strided shares).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/data/sampler.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::data;
using tessera::testing::expect_error;

namespace {
bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::vector<int64_t> expected(static_cast<size_t>(n));
  std::iota(expected.begin(), expected.end(), int64_t{0});
  std::sort(v.begin(), v.end());
  return v == expected;
}
}  // namespace

TEST(SequentialSampler, InOrder) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(3), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(SequentialSampler(0).indices(0).empty());
}

TEST(RandomSampler, PermutationDeterministicPerEpoch) {
  for (int64_t n : {0, 1, 2, 7, 100}) {
    RandomSampler s(n, 42);
    EXPECT_EQ(s.size(), n);
    for (int64_t epoch : {0, 1, 5}) {
      EXPECT_TRUE(is_permutation_of_range(s.indices(epoch), n)) << "n " << n << " epoch " << epoch;
      EXPECT_EQ(s.indices(epoch), RandomSampler(n, 42).indices(epoch)) << "reproducible from (seed, epoch) alone";
    }
  }
  RandomSampler s(100, 42);
  EXPECT_NE(s.indices(0), s.indices(1));
  EXPECT_NE(s.indices(0), RandomSampler(100, 43).indices(0));
  EXPECT_NE(s.indices(1), RandomSampler(100, 43).indices(0)) << "(seed, epoch) is mixed, not added";
}

TEST(RandomSampler, RoughlyUniform) {
  // Where element 0 lands over 4000 epochs of n = 4: each position ~1000 times (sd ~27).
  RandomSampler s(4, 1);
  std::vector<int> where(4);
  for (int64_t e = 0; e < 4000; ++e) {
    auto v = s.indices(e);
    ++where[std::find(v.begin(), v.end(), 0) - v.begin()];
  }
  for (int c : where) EXPECT_NEAR(c, 1000, 150);
}

TEST(DistributedSampler, HandComputedExamples) {
  // n = 10, world 4: num_samples = ceil(10/4) = 3, total 12, list 0..9 padded with 0, 1.
  std::vector<std::vector<int64_t>> expected = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(DistributedSampler(10, r, 4, false).indices(0), expected[r]) << "rank " << r;
  // drop_last: num_samples = floor(10/4) = 2, total 8: 0..7.
  expected = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(DistributedSampler(10, r, 4, false, 0, true).indices(0), expected[r]) << "rank " << r;
  // n = 2, world 5: padding (3) exceeds n, so the list repeats: 0 1 0 1 0.
  expected = {{0}, {1}, {0}, {1}, {0}};
  for (int r = 0; r < 5; ++r) EXPECT_EQ(DistributedSampler(2, r, 5, false).indices(0), expected[r]) << "rank " << r;
  EXPECT_EQ(DistributedSampler(2, 3, 5, false, 0, true).size(), 0);
}

class DistributedSweep : public ::testing::TestWithParam<std::tuple<int64_t, int, bool, bool>> {};

TEST_P(DistributedSweep, EqualSharesCoveringEveryIndex) {
  auto [n, world, shuffle, drop_last] = GetParam();
  const int64_t num = drop_last ? n / world : (n + world - 1) / world;
  for (int64_t epoch : {0, 1}) {
    // Rebuild the padded list from the shares: list[r + k * world] = share_r[k].
    std::vector<int64_t> list(static_cast<size_t>(num * world));
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(n, r, world, shuffle, 9, drop_last);
      ASSERT_EQ(s.size(), num);
      auto share = s.indices(epoch);
      ASSERT_EQ(static_cast<int64_t>(share.size()), num);
      for (int64_t k = 0; k < num; ++k) list[r + k * world] = share[k];
    }
    if (drop_last) {
      // A prefix of one epoch's list: distinct indices.
      EXPECT_EQ(std::set<int64_t>(list.begin(), list.end()).size(), list.size());
    } else if (n > 0) {
      // The first n entries are a permutation; the padding repeats from the start.
      EXPECT_TRUE(is_permutation_of_range(std::vector<int64_t>(list.begin(), list.begin() + n), n));
      for (size_t p = n; p < list.size(); ++p) EXPECT_EQ(list[p], list[p % n]);
    }
    if (!shuffle) {
      for (size_t p = 0; p < list.size(); ++p) EXPECT_EQ(list[p], static_cast<int64_t>(p % n));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, DistributedSweep,
                         ::testing::Combine(::testing::Values<int64_t>(0, 1, 5, 10, 11, 17), ::testing::Values(1, 2, 3, 4, 7),
                                            ::testing::Bool(), ::testing::Bool()));

TEST(DistributedSampler, ShuffleChangesWithEpochAndSeed) {
  DistributedSampler s(100, 1, 3, true, 5);
  EXPECT_NE(s.indices(0), s.indices(1));
  EXPECT_EQ(s.indices(2), DistributedSampler(100, 1, 3, true, 5).indices(2));
  EXPECT_NE(s.indices(0), DistributedSampler(100, 1, 3, true, 6).indices(0));
}

TEST(DistributedSampler, GlobalOrderIsTheSingleProcessOne) {
  // With world size N and per-rank batch B, step s of every rank together covers the single-process
  // batch s of size N·B: what makes DDP equal single-process training on the same data.
  const int64_t n = 40, batch = 3;
  for (int world : {1, 2, 4}) {
    auto single = RandomSampler(n, 7).indices(1);
    std::vector<std::vector<int64_t>> shares;
    for (int r = 0; r < world; ++r) shares.push_back(DistributedSampler(n, r, world, true, 7, true).indices(1));
    for (int64_t step = 0; step * batch * world + batch * world <= n; ++step) {
      std::multiset<int64_t> global(single.begin() + step * batch * world, single.begin() + (step + 1) * batch * world);
      std::multiset<int64_t> together;
      for (auto& share : shares) together.insert(share.begin() + step * batch, share.begin() + (step + 1) * batch);
      EXPECT_EQ(together, global) << "world " << world << " step " << step;
    }
  }
}

TEST(DistributedSampler, ValidatesRankAndWorld) {
  expect_error<ValueError>([] { DistributedSampler(10, 4, 4); }, {"[DistributedSampler]", "rank 4", "world_size 4"});
  expect_error<ValueError>([] { DistributedSampler(10, -1, 4); }, {"rank -1"});
  expect_error<ValueError>([] { DistributedSampler(10, 0, 0); }, {"world_size", "got 0"});
}
