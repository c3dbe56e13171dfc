// take_shard and gather_shard are inverse: every rank's shards gathered give the full tensor back,
// for any dim, uneven splits and blocked layouts (attention's [q; k; v]).
#include <gtest/gtest.h>

#include "parallel/tensor/tp_testing.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/tensor/mappings.h"
#include "tessera/parallel/tensor/sharding.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using namespace parallel::tensor;
using testing::expect_close;
using testing::threaded;

class TensorParallelSharding : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelSharding, GatherUndoesTake) {
  const int world = GetParam();
  Generator gen(70);
  const Tensor full = randn({15, 7}, gen);
  const std::vector<ShardSpec> specs{{0, 15, 1}, {1, 7, 1}, {0, 15, 3}};
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    for (const ShardSpec& spec : specs) {
      Tensor shard = take_shard(full, spec, g.rank(), world);
      EXPECT_EQ(full_shape(shard, spec), full.shape());
      expect_close(gather_shard(shard, spec, g), full, 0, "dim " + std::to_string(spec.dim) + " blocks " +
                   std::to_string(spec.blocks));
    }
  });
}

TEST_P(TensorParallelSharding, BlocksKeepTheOwnPartOfEachBlock) {
  const int world = GetParam();
  const Tensor full = reshape(to_dtype(arange(6), DType::Float32), {6, 1});  // blocks [0 1] [2 3] [4 5]
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    auto [begin, end] = shard_range(2, g.rank(), world);
    std::vector<float> want;
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t i = begin; i < end; ++i) want.push_back(static_cast<float>(2 * k + i));
    EXPECT_EQ(take_shard(full, {0, 6, 3}, g.rank(), world).to_vector<float>(), want);
  });
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, TensorParallelSharding, ::testing::Values(1, 2, 3));

TEST(TensorParallelShardingErrors, BadSpecsNameTheOp) {
  testing::expect_error<ValueError>([] { take_shard(zeros({4, 2}), {2, 4, 1}, 0, 1); }, {"[take_shard]", "dim 2"});
  testing::expect_error<ValueError>([] { take_shard(zeros({4, 2}), {0, 4, 3}, 0, 1); },
                                    {"[take_shard]", "3 equal blocks"});
  testing::expect_error<ValueError>([] { take_shard(zeros({4, 2}), {0, 5, 1}, 0, 1); },
                                    {"[take_shard]", "size 5", "[4, 2]"});
}

}  // namespace
}  // namespace tessera
