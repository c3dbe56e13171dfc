#include <gtest/gtest.h>

#include <cmath>

#include "tessera/train/config.h"
#include "tessera/train/lr_scaling.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::train;
using tessera::testing::expect_error;

TEST(ScaledLr, LinearAndSqrtRules) {
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "none", 8), 0.1);
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "linear", 8), 0.8);
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "sqrt", 4), 0.2);
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, "sqrt", 2), 0.1 * std::sqrt(2.0));
  for (const char* rule : {"none", "linear", "sqrt"}) EXPECT_DOUBLE_EQ(scaled_lr(0.25, rule, 1), 0.25) << rule;
}

TEST(ScaledLr, RejectsUnknownRuleAndBadWorldSize) {
  expect_error<ValueError>([] { scaled_lr(0.1, "quadratic", 2); }, {"[scaled_lr]", "'quadratic'", "linear"});
  expect_error<ValueError>([] { scaled_lr(0.1, "linear", 0); }, {"[scaled_lr]", "world_size"});
}

TEST(ScaledLr, ConfigKeysForLargeBatchOptimizers) {
  TrainConfig c = parse_config(R"(
[optimizer]
name = "lars"
lr = 2.0
trust_coefficient = 0.02
exclude_bias_and_norm = false
scale_lr = "linear"
)", "lars.toml");
  validate(c);
  EXPECT_DOUBLE_EQ(c.optimizer.trust_coefficient, 0.02);
  EXPECT_FALSE(c.optimizer.exclude_bias_and_norm);
  EXPECT_EQ(c.optimizer.scale_lr, "linear");
  EXPECT_EQ(TrainConfig{}.optimizer.scale_lr, "none");
  EXPECT_DOUBLE_EQ(TrainConfig{}.optimizer.trust_coefficient, 0.001);
  apply_override(c, "optimizer.name=lamb");
  validate(c);
  apply_override(c, "optimizer.scale_lr=cube");
  expect_error<ValueError>([&] { validate(c); }, {"optimizer.scale_lr", "'cube'", "sqrt"});
  apply_override(c, "optimizer.scale_lr=sqrt");
  apply_override(c, "optimizer.trust_coefficient=0");
  expect_error<ValueError>([&] { validate(c); }, {"optimizer.trust_coefficient", "positive"});
}
