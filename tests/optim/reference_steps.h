// Shared by the LARS and LAMB tests: a few parameters and per-step gradients covering the edge
// cases (a zero weight tensor, an all-zero gradient, a parameter without a gradient, a 1-D bias), and
// helpers that run a tessera optimizer on them beside a double-precision scalar reference.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"
#include "testing/expect.h"

namespace tessera::testing {

using Vec = std::vector<double>;

inline double l2(const Vec& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

struct ReferenceCase {
  std::vector<Shape> shapes;
  std::vector<std::vector<float>> init;                             // [param]
  std::vector<std::vector<std::optional<std::vector<float>>>> grads;  // [step][param]; nullopt: no .grad
};

// W (3, 4) random, b (3) random, Z (2, 2) zero; 4 steps of random gradients except that W's is all
// zero at step 1 and b has none at step 2.
inline ReferenceCase make_reference_case() {
  Generator gen(2024);
  ReferenceCase c;
  c.shapes = {{3, 4}, {3}, {2, 2}};
  c.init = {randn({3, 4}, gen).to_vector<float>(), randn({3}, gen).to_vector<float>(), std::vector<float>(4, 0.0f)};
  for (int step = 0; step < 4; ++step) {
    std::vector<std::optional<std::vector<float>>> g;
    for (const Shape& s : c.shapes) g.emplace_back(mul(randn(s, gen), 0.5f).to_vector<float>());
    if (step == 1) g[0] = std::vector<float>(12, 0.0f);
    if (step == 2) g[1] = std::nullopt;
    c.grads.push_back(g);
  }
  return c;
}

inline std::vector<Tensor> make_params(const ReferenceCase& c) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < c.shapes.size(); ++i) out.push_back(from_vector(c.init[i], c.shapes[i]).set_requires_grad(true));
  return out;
}

// Runs steps [begin, end) of the case on `opt`, whose parameters are `params`.
inline void run_steps(optim::Optimizer& opt, const std::vector<Tensor>& params, const ReferenceCase& c, size_t begin,
                      size_t end) {
  for (size_t s = begin; s < end; ++s) {
    for (size_t i = 0; i < params.size(); ++i)
      params[i].set_grad(c.grads[s][i] ? from_vector(*c.grads[s][i], c.shapes[i]) : Tensor());
    opt.step();
  }
}

// Each parameter within 1e-5 (relative above 1) of the reference.
inline void expect_matches(const std::vector<Tensor>& params, const std::vector<Vec>& expected) {
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> got = params[i].to_vector<float>();
    ASSERT_EQ(got.size(), expected[i].size());
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_NEAR(got[k], expected[i][k], 1e-5 * std::max(1.0, std::fabs(expected[i][k])))
          << "parameter " << i << " element " << k;
  }
}

// The reference's starting weights, in double.
inline std::vector<Vec> initial_weights(const ReferenceCase& c) {
  std::vector<Vec> w;
  for (const auto& v : c.init) w.emplace_back(v.begin(), v.end());
  return w;
}

}  // namespace tessera::testing
