// exp and erf written to vectorise (backend/cpu/vector_math.h), against libm in double: exp within
// 2 float ulps over float's normal range, erf within 6e-7; and GELU built on them against its
// definition with libm's erf.
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
