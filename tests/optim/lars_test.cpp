// LARS against a double-precision scalar reference of the update in lars.h.
#include <gtest/gtest.h>

#include "optim/reference_steps.h"
#include "tessera/optim/lars.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// The paper's Algorithm 1, one parameter tensor at a time, in double.
void lars_reference(const optim::LARSOptions& o, const ReferenceCase& c, size_t steps, std::vector<Vec>& w,
                    std::vector<Vec>& v) {
  v.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i) v[i].resize(w[i].size(), 0.0);
  for (size_t s = 0; s < steps; ++s) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (!c.grads[s][i]) continue;
      Vec g(c.grads[s][i]->begin(), c.grads[s][i]->end());
      const bool adapt = !(o.exclude_bias_and_norm && c.shapes[i].size() <= 1);
      const double wd = adapt ? o.weight_decay : 0.0;
      double trust = 1.0;
      if (adapt && l2(w[i]) > 0 && l2(g) > 0) trust = o.trust_coefficient * l2(w[i]) / (l2(g) + wd * l2(w[i]) + o.eps);
      for (size_t k = 0; k < g.size(); ++k) {
        v[i][k] = o.momentum * v[i][k] + o.lr * trust * (g[k] + wd * w[i][k]);
        w[i][k] -= v[i][k];
      }
    }
  }
}

void expect_lars_matches_reference(const optim::LARSOptions& o) {
  ReferenceCase c = make_reference_case();
  std::vector<Tensor> params = make_params(c);
  optim::LARS opt(params, o);
  run_steps(opt, params, c, 0, c.grads.size());
  std::vector<Vec> w = initial_weights(c), v;
  lars_reference(o, c, c.grads.size(), w, v);
  expect_matches(params, w);
  // The case must exercise the update: every tensor moved well beyond the tolerance.
  for (size_t i = 0; i < w.size(); ++i) EXPECT_GT(std::fabs(w[i][0] - c.init[i][0]), 1e-3) << "parameter " << i;
  EXPECT_EQ(opt.step_count(), 4);
}

}  // namespace

TEST(Lars, MomentumWeightDecayExcludingBiasMatchesReference) {
  expect_lars_matches_reference({.lr = 2.0, .momentum = 0.9, .weight_decay = 0.01, .trust_coefficient = 0.02});
}

TEST(Lars, AdaptingEveryParameterMatchesReference) {
  expect_lars_matches_reference(
      {.lr = 1.5, .momentum = 0.5, .weight_decay = 0.1, .trust_coefficient = 0.05, .exclude_bias_and_norm = false});
}

TEST(Lars, WithoutMomentumMatchesReference) {
  expect_lars_matches_reference({.lr = 3.0, .momentum = 0.0, .weight_decay = 0.05, .trust_coefficient = 0.01});
}

TEST(Lars, TrustRatioIsOneForZeroWeightOrZeroGradient) {
  // Z = 0: the step is lr * g exactly; W with a zero gradient and no decay does not move.
  Tensor z = zeros({2, 1}).set_requires_grad(true), w = from_vector(std::vector<float>{3, 4}, {2, 1}).set_requires_grad(true);
  optim::LARS opt({z, w}, {.lr = 0.5, .momentum = 0.0, .trust_coefficient = 0.001});
  z.set_grad(from_vector(std::vector<float>{1, -2}, {2, 1}));
  w.set_grad(zeros({2, 1}));
  opt.step();
  expect_near(z, {-0.5f, 1.0f}, 1e-7f);
  expect_near(w, {3.0f, 4.0f}, 0.0f);
  // A 2-D tensor with both norms non-zero: ||w|| = 5, ||g|| = 10, trust = 0.001 * 5 / 10.
  w.set_grad(from_vector(std::vector<float>{6, 8}, {2, 1}));
  opt.step();
  expect_near(w, {3.0f - 0.5f * 0.0005f * 6, 4.0f - 0.5f * 0.0005f * 8}, 1e-6f);
}

TEST(Lars, StateDictResumesIdentically) {
  // lr 1.3 is not a float32 value: the resumed lr (saved as float32) must still give identical steps.
  optim::LARSOptions o{.lr = 1.3, .momentum = 0.9, .weight_decay = 0.01, .trust_coefficient = 0.02};
  ReferenceCase c = make_reference_case();
  std::vector<Tensor> a = make_params(c);
  optim::LARS opt(a, o);
  run_steps(opt, a, c, 0, 2);
  std::vector<Tensor> b;
  for (const Tensor& p : a) b.push_back(p.clone().detach().set_requires_grad(true));
  optim::LARS resumed(b, optim::LARSOptions{});  // options are configuration, not state
  resumed.options = o;
  resumed.load_state_dict(opt.state_dict());
  EXPECT_EQ(resumed.step_count(), 2);
  EXPECT_FLOAT_EQ(static_cast<float>(resumed.lr()), 1.3f);
  run_steps(opt, a, c, 2, 4);
  run_steps(resumed, b, c, 2, 4);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].to_vector<float>(), b[i].to_vector<float>()) << "parameter " << i;
}

TEST(Lars, RejectsBadOptions) {
  Tensor p = zeros({2}).set_requires_grad(true);
  expect_error<ValueError>([&] { optim::LARS({p}, {.trust_coefficient = 0.0}); }, {"[LARS]", "trust_coefficient"});
  expect_error<ValueError>([&] { optim::LARS({p}, {.momentum = -1.0}); }, {"[LARS]", "momentum"});
}
