// The region mappings: forward and backward of each against its definition, at world sizes 1-3,
// with uneven shards; a finite-difference check of each at tp = 1.
#include <gtest/gtest.h>

#include "parallel/tensor/tp_testing.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/tensor/mappings.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using namespace parallel::tensor;
using testing::borrow;
using testing::expect_close;
using testing::threaded;

TEST(TensorParallelShardRange, SplitsUnevenlyWithLaterRanksLarger) {
  EXPECT_EQ(shard_range(13, 0, 2), (std::pair<int64_t, int64_t>{0, 6}));
  EXPECT_EQ(shard_range(13, 1, 2), (std::pair<int64_t, int64_t>{6, 13}));
  EXPECT_EQ(shard_sizes(100, 3), (std::vector<int64_t>{33, 33, 34}));
  EXPECT_EQ(shard_sizes(2, 3), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(shard_sizes(0, 2), (std::vector<int64_t>{0, 0}));
  testing::expect_error<ValueError>([] { shard_range(5, 2, 2); }, {"[shard_range]", "rank 2"});
}

class TensorParallelMappings : public ::testing::TestWithParam<int> {};

// y = copy_to(x): y == x; L = Σ_r Σ(y·R_r), so dx = Σ_r R_r on every rank.
TEST_P(TensorParallelMappings, CopyToSumsTheGradient) {
  const int world = GetParam();
  Generator gen(1);
  Tensor x_full = randn({2, 3}, gen), r_sum = zeros({2, 3});
  std::vector<Tensor> rs;
  for (int r = 0; r < world; ++r) add_(r_sum, rs.emplace_back(randn({2, 3}, gen)));
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    Tensor x = x_full.clone().set_requires_grad(true);
    Tensor y = copy_to_tensor_parallel_region(x, borrow(g));
    expect_close(y, x_full, 0, "copy_to forward");
    sum(mul(y, rs[g.rank()])).backward();
    expect_close(x.grad(), r_sum, 1e-6f, "copy_to backward");
  });
}

// y = reduce_from(x_r) = Σ_r x_r; dx_r = dy (identity).
TEST_P(TensorParallelMappings, ReduceFromSumsTheValues) {
  const int world = GetParam();
  Generator gen(2);
  Tensor x_sum = zeros({4}), weights = randn({4}, gen);
  std::vector<Tensor> xs;
  for (int r = 0; r < world; ++r) add_(x_sum, xs.emplace_back(randn({4}, gen)));
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    Tensor x = xs[g.rank()].clone().set_requires_grad(true);
    Tensor y = reduce_from_tensor_parallel_region(x, borrow(g));
    expect_close(y, x_sum, 1e-6f, "reduce_from forward");
    sum(mul(y, weights)).backward();
    expect_close(x.grad(), weights, 0, "reduce_from backward");
  });
}

// Rank r holds (2, 3, r + 1) columns: gather gives them side by side; the gradient is the own slice.
TEST_P(TensorParallelMappings, GatherFromJoinsUnevenShards) {
  const int world = GetParam();
  Generator gen(3);
  std::vector<Tensor> xs;
  for (int r = 0; r < world; ++r) xs.push_back(randn({2, 3, r + 1}, gen));
  Tensor joined = cat(xs, 2);
  Tensor weights = randn(joined.shape(), gen);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    const int r = g.rank();
    Tensor x = xs[r].clone().set_requires_grad(true);
    Tensor y = gather_from_tensor_parallel_region(x, borrow(g));
    expect_close(y, joined, 0, "gather_from forward");
    sum(mul(y, weights)).backward();
    const int64_t begin = r * (r + 1) / 2;  // 1 + 2 + ... + r columns before rank r
    expect_close(x.grad(), contiguous(weights.slice(2, begin, begin + r + 1)), 0, "gather_from backward");
  });
}

// x (2, 7) replicated: scatter keeps shard_range(7); the gradient all-gathers every rank's.
TEST_P(TensorParallelMappings, ScatterToKeepsTheOwnSlice) {
  const int world = GetParam();
  Generator gen(4);
  Tensor x_full = randn({2, 7}, gen), weights = randn({2, 7}, gen);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    auto [begin, end] = shard_range(7, g.rank(), world);
    Tensor x = x_full.clone().set_requires_grad(true);
    Tensor y = scatter_to_tensor_parallel_region(x, borrow(g));
    expect_close(y, contiguous(x_full.slice(1, begin, end)), 0, "scatter_to forward");
    sum(mul(y, contiguous(weights.slice(1, begin, end)))).backward();
    expect_close(x.grad(), weights, 0, "scatter_to backward");
  });
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, TensorParallelMappings, ::testing::Values(1, 2, 3));

TEST(TensorParallelMappingsGradcheck, EveryMappingAtOneRank) {
  testing::run_on_threads(1, threaded(1), [](dist::ProcessGroup& g) {
    auto group = borrow(g);
    Generator gen(5);
    using Mapping = Tensor (*)(const Tensor&, const dist::ProcessGroupPtr&);
    const std::vector<std::pair<const char*, Mapping>> mappings{
        {"copy_to", copy_to_tensor_parallel_region},
        {"reduce_from", reduce_from_tensor_parallel_region},
        {"gather_from", [](const Tensor& x, const dist::ProcessGroupPtr& p) {
           return gather_from_tensor_parallel_region(x, p);
         }},
        {"scatter_to", scatter_to_tensor_parallel_region}};
    for (const auto& [name, mapping] : mappings) {
      // tanh after the mapping so the check sees a non-constant Jacobian flow through it.
      auto f = [&](const std::vector<Tensor>& in) { return tanh(mul(mapping(in[0], group), in[1])); };
      auto r = autograd::gradcheck(f, {randn({3, 4}, gen), randn({3, 4}, gen)});
      EXPECT_TRUE(r.ok) << name << ": " << r.message;
    }
  });
}

TEST(TensorParallelMappingsErrors, NameTheOp) {
  testing::run_on_threads(2, threaded(2), [](dist::ProcessGroup& g) {
    auto group = borrow(g);
    testing::expect_error<ValueError>([&] { copy_to_tensor_parallel_region(arange(3), group); },
                                      {"[copy_to_tensor_parallel_region]", "int64"});
    testing::expect_error<ValueError>([&] { scatter_to_tensor_parallel_region(scalar_tensor(1.0f), group); },
                                      {"[scatter_to_tensor_parallel_region]", "last dimension"});
    testing::expect_error<ValueError>([&] { gather_from_tensor_parallel_region(zeros({2, 3}), group, {3}); },
                                      {"[gather_from_tensor_parallel_region]", "1 sizes for 2 ranks"});
    testing::expect_error<ValueError>([&] { reduce_from_tensor_parallel_region(zeros({2}), nullptr); },
                                      {"[reduce_from_tensor_parallel_region]", "null"});
  });
}

}  // namespace
}  // namespace tessera
