// The parameter servers' consistency rules (parallel/ps/consistency.h), apart from any connection:
// when a push is applied and when a pull is answered, in sync, async and bounded-staleness modes.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/parallel/ps/consistency.h"

namespace tessera::parallel::ps {
namespace {

// One dense parameter of 4 values, all on this server, plain SGD.
ServerShard one_piece_shard() {
  ServerShard shard({ParamSpec{"w", 1, 4, false}}, 0, 1, OptimizerSpec{});
  const std::vector<float> ones(4, 1.0f);
  shard.init_rows(0, 0, reinterpret_cast<const uint8_t*>(ones.data()), 4 * sizeof(float), true);
  return shard;
}

void push_gradient(ServerShard& shard, float g, bool sums) {
  float* grad = shard.held()[0].grad.data<float>();
  for (int k = 0; k < 4; ++k) grad[k] = sums ? grad[k] + g : g;
}

float value(ServerShard& shard) { return shard.held()[0].values.data<float>()[0]; }

TEST(Consistency, SyncAveragesEveryWorkersPushThenAnswersThePullsOfTheNextStep) {
  ConsistencyRule rule(Mode::kSync, 0);
  ServerShard shard = one_piece_shard();
  std::vector<RowsPush> no_rows;
  EXPECT_FALSE(rule.refuse_push(0, 0).has_value());
  EXPECT_TRUE(rule.refuse_push(1, 0).has_value());  // a step ahead of the servers
  EXPECT_FALSE(rule.may_serve(1, 0));
  push_gradient(shard, 1.0f, rule.sums_pushes());
  EXPECT_FALSE(rule.on_push(shard, 0.5, no_rows));
  EXPECT_FALSE(rule.complete_step(shard, 2));  // one of two workers has pushed
  push_gradient(shard, 3.0f, rule.sums_pushes());
  EXPECT_FALSE(rule.on_push(shard, 0.5, no_rows));
  EXPECT_TRUE(rule.complete_step(shard, 2));
  EXPECT_EQ(rule.version(), 1);
  EXPECT_FLOAT_EQ(value(shard), 1.0f - 0.5f * 2.0f);  // the mean gradient, 2, at lr 0.5
  EXPECT_TRUE(rule.may_serve(1, 1));
  EXPECT_TRUE(rule.needs_every_worker());
}

TEST(Consistency, AsyncAppliesEachPushAsItComes) {
  ConsistencyRule rule(Mode::kAsync, 0);
  ServerShard shard = one_piece_shard();
  std::vector<RowsPush> no_rows;
  EXPECT_FALSE(rule.refuse_push(5, 0).has_value());
  push_gradient(shard, 1.0f, rule.sums_pushes());
  EXPECT_TRUE(rule.on_push(shard, 0.25, no_rows));
  EXPECT_EQ(rule.version(), 1);
  EXPECT_FLOAT_EQ(value(shard), 0.75f);
  EXPECT_FALSE(rule.complete_step(shard, 1));
  EXPECT_TRUE(rule.may_serve(100, 0));
  EXPECT_FALSE(rule.needs_every_worker());
}

TEST(Consistency, BoundedStalenessHoldsAPullTooFarAheadOfTheSlowestWorker) {
  ConsistencyRule rule(Mode::kBoundedStaleness, 2);
  EXPECT_TRUE(rule.may_serve(5, 3));
  EXPECT_FALSE(rule.may_serve(6, 3));
  EXPECT_EQ(rule.describe(), "ssp mode, staleness 2");
  EXPECT_THROW(ConsistencyRule(Mode::kAsync, -1), ValueError);
  EXPECT_EQ(parse_mode("ssp"), Mode::kBoundedStaleness);
  EXPECT_THROW(parse_mode("eventual"), ValueError);
}

}  // namespace
}  // namespace tessera::parallel::ps
