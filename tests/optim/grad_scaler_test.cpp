// Dynamic loss scaling (optim/grad_scaler.h): the scale backs off on an overflow and grows after
// growth_interval clean steps, as PyTorch's GradScaler does; unscaling multiplies every gradient by
// 1/scale and finds an inf or NaN wherever it is.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessera/ops/ops.h"
#include "tessera/optim/grad_scaler.h"

namespace tessera {
namespace {

TEST(GradScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  optim::GradScaler scaler({.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 512);  // two clean steps: not yet
  EXPECT_EQ(scaler.growth_tracker(), 2);
  scaler.update(true);  // an overflow restarts the count
  EXPECT_EQ(scaler.scale(), 256);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  // A run of overflows never reaches a zero scale.
  for (int i = 0; i < 200; ++i) scaler.update(true);
  EXPECT_GT(scaler.scale(), 0);
}

TEST(GradScaler, RefusesOptionsAndStatesItCannotUse) {
  EXPECT_THROW(optim::GradScaler({.init_scale = 0}), ValueError);
  EXPECT_THROW(optim::GradScaler({.init_scale = std::numeric_limits<double>::infinity()}), ValueError);
  EXPECT_THROW(optim::GradScaler({.growth_factor = 1}), ValueError);
  EXPECT_THROW(optim::GradScaler({.backoff_factor = 1}), ValueError);
  EXPECT_THROW(optim::GradScaler({.growth_interval = 0}), ValueError);
  optim::GradScaler scaler;
  EXPECT_THROW(scaler.restore(-1, 0, 0), ValueError);
  EXPECT_THROW(scaler.restore(std::nan(""), 0, 0), ValueError);
  scaler.restore(8, 5, 2);
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_EQ(scaler.growth_tracker(), 5);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(GradScaler, UnscalingDividesEveryGradientAndFindsNonFiniteValues) {
  Tensor a = zeros({37}).set_requires_grad(true), b = zeros({5, 3}).set_requires_grad(true);
  Tensor unused = zeros({2}).set_requires_grad(true);  // no gradient: skipped
  std::vector<float> ga(37), gb(15);
  for (int i = 0; i < 37; ++i) ga[i] = static_cast<float>(i) * 4.0f;
  for (int i = 0; i < 15; ++i) gb[i] = -static_cast<float>(i);
  a.set_grad(from_vector(ga, {37}));
  b.set_grad(transpose(from_vector(gb, {3, 5}), 0, 1));  // not contiguous: made so
  EXPECT_FALSE(optim::unscale_gradients({a, b, unused}, 0.25));
  const std::vector<float> got_a = a.grad().to_vector<float>(), got_b = contiguous(b.grad()).to_vector<float>();
  for (int i = 0; i < 37; ++i) EXPECT_EQ(got_a[i], static_cast<float>(i));
  const std::vector<float> want_b = contiguous(transpose(from_vector(gb, {3, 5}), 0, 1)).to_vector<float>();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(got_b[i], want_b[i] * 0.25f);
  // An inf or a NaN anywhere, in any tensor, at any position (the vector loop's tail included).
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()})
    for (int at : {0, 17, 36}) {
      std::vector<float> g(37, 1.0f);
      g[at] = bad;
      a.set_grad(from_vector(g, {37}));
      b.set_grad(ones({5, 3}));
      EXPECT_TRUE(optim::unscale_gradients({b, a}, 0.5)) << bad << " at " << at;
    }
  // A finite value that unscaling would not turn infinite is not an overflow, however large.
  a.set_grad(full({37}, 3e38f));
  EXPECT_FALSE(optim::unscale_gradients({a}, 1.0));
}

}  // namespace
}  // namespace tessera
