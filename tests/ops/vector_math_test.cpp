// exp and erf written to vectorise (backend/cpu/vector_math.h), against libm in double: exp within
// 2 float ulps over float's normal range, erf within 6e-7; and GELU built on them against its
// definition with libm's erf; exp of non-positive x, lane sums and softmax's rows.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/backend/cpu/vector_math.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

TEST(VectorMath, ExpIsWithinTwoUlpsOfLibm) {
  double worst = 0;
  for (float x = -87.3f; x < 88.0f; x += 0.00097f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(cpu::exp_vectorisable(x) - want) / want);
  }
  EXPECT_LT(worst, 2 * 0x1p-24 * 2);  // 2 ulps of a float in [1, 2) is 2^-22 relative at most
  EXPECT_EQ(cpu::exp_vectorisable(0.0f), 1.0f);
  // Far below the range: tiny and not negative, never garbage.
  for (float x : {-100.0f, -1e4f, -1e6f}) {
    EXPECT_GE(cpu::exp_vectorisable(x), 0.0f) << x;
    EXPECT_LT(cpu::exp_vectorisable(x), 1e-37f) << x;
  }
}

TEST(VectorMath, ExpOfNonPositiveIsExactlyZeroBelowMinus87AndOtherwiseExp) {
  for (float x = -87.0f; x <= 0.0f; x += 0.00097f) EXPECT_EQ(cpu::exp_nonpositive(x), cpu::exp_vectorisable(x)) << x;
  EXPECT_EQ(cpu::exp_nonpositive(-0.0f), 1.0f);
  for (float x : {-87.01f, -100.0f, -1e30f, -INFINITY}) EXPECT_EQ(cpu::exp_nonpositive(x), 0.0f) << x;
}

TEST(VectorMath, SumInLanesAndAnyNan) {
  for (int64_t n : {0, 1, 15, 16, 17, 100, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    double want = 0;
    for (int64_t i = 0; i < n; ++i) want += x[static_cast<size_t>(i)] = 1.0f + 0.001f * static_cast<float>(i % 37);
    EXPECT_NEAR(cpu::sum_in_lanes(x.data(), n), want, 1e-6 * std::max(1.0, want)) << n;
    EXPECT_FALSE(cpu::any_nan(x.data(), n));
    if (n > 0) {
      x.back() = -NAN;
      EXPECT_TRUE(cpu::any_nan(x.data(), n));
      x.back() = INFINITY;
      EXPECT_FALSE(cpu::any_nan(x.data(), n));
    }
  }
}

// Softmax's vectorised rows against libm in double, and the rows it leaves to libm: a masked score
// (-inf) is exactly 0, a NaN anywhere makes the row NaN (x86's NaN from inf - inf has its sign bit
// set, which an unsigned test of the bits would read as "below -87"), and an all-masked row is NaN.
TEST(VectorMath, SoftmaxRowsMatchLibmAndKeepItsRulesForInfAndNan) {
  const int64_t D = 37;
  std::vector<float> rows;
  for (int64_t i = 0; i < D; ++i) rows.push_back(std::sin(0.7f * static_cast<float>(i)) * 30.0f);
  std::vector<float> masked = rows;
  for (int64_t i = 5; i < D; i += 3) masked[static_cast<size_t>(i)] = -INFINITY;
  std::vector<float> with_nan = rows;
  with_nan[7] = -NAN;
  std::vector<float> all_masked(D, -INFINITY);
  std::vector<float> x = rows;
  for (const auto* r : {&masked, &with_nan, &all_masked}) x.insert(x.end(), r->begin(), r->end());
  const std::vector<float> y = softmax(from_vector(x, {4, D}), -1).to_vector<float>();
  const std::vector<float> logy = log_softmax(from_vector(x, {4, D}), -1).to_vector<float>();
  for (int row = 0; row < 2; ++row) {
    const float* xr = x.data() + row * D;
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < D; ++i) mx = std::max(mx, double(xr[i]));
    for (int64_t i = 0; i < D; ++i) s += std::exp(double(xr[i]) - mx);
    for (int64_t i = 0; i < D; ++i) {
      const double want = std::exp(double(xr[i]) - mx) / s;
      if (std::isinf(xr[i])) {
        EXPECT_EQ(y[static_cast<size_t>(row * D + i)], 0.0f);
        EXPECT_EQ(logy[static_cast<size_t>(row * D + i)], -INFINITY);
      } else {
        // Relative to want: a few ulps, plus the float rounding of x - max, which exp turns into a
        // relative error of |x - max| ulps.
        const double ulps = 4 + std::abs(double(xr[i]) - mx);
        EXPECT_NEAR(y[static_cast<size_t>(row * D + i)], want, ulps * 0x1p-24 * want) << row << " " << i;
        EXPECT_NEAR(logy[static_cast<size_t>(row * D + i)], std::log(want), 1e-5) << row << " " << i;
      }
    }
  }
  for (int row = 2; row < 4; ++row)
    for (int64_t i = 0; i < D; ++i) {
      EXPECT_TRUE(std::isnan(y[static_cast<size_t>(row * D + i)])) << row << " " << i;
      EXPECT_TRUE(std::isnan(logy[static_cast<size_t>(row * D + i)])) << row << " " << i;
    }
}

TEST(VectorMath, ErfIsWithinSixTenMillionthsOfLibm) {
  double worst = 0;
  for (float x = -8.0f; x < 8.0f; x += 0.0001f)
    worst = std::max(worst, std::abs(cpu::erf_vectorisable(x) - std::erf(static_cast<double>(x))));
  EXPECT_LT(worst, 6e-7);
  EXPECT_EQ(cpu::erf_vectorisable(1e30f), 1.0f);
  EXPECT_EQ(cpu::erf_vectorisable(-1e30f), -1.0f);
  EXPECT_EQ(cpu::erf_vectorisable(0.0f), 0.0f);
}

TEST(VectorMath, GeluMatchesItsDefinitionForwardAndBackward) {
  std::vector<float> xs;
  for (float x = -9.0f; x <= 9.0f; x += 0.037f) xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x = from_vector(xs, {n}).set_requires_grad(true);
  Tensor y = gelu(x);
  y.backward(ones({n}));
  const std::vector<float> got = y.to_vector<float>(), grad = x.grad().to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[i], cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    EXPECT_NEAR(got[i], v * cdf, 1e-6 * std::max(1.0, std::abs(v))) << v;
    EXPECT_NEAR(grad[i], cdf + v * pdf, 2e-6 * std::max(1.0, std::abs(v))) << v;
  }
}

}  // namespace
}  // namespace tessera
