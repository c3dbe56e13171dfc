// LAMB against a double-precision scalar reference of the update in lamb.h.
#include <gtest/gtest.h>

#include <algorithm>

#include "optim/reference_steps.h"
#include "tessera/optim/lamb.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// The paper's Algorithm 2, one parameter tensor at a time, in double. A parameter without a
// gradient is skipped but the step count (shared, as the optimizer's) still advances.
void lamb_reference(const optim::LAMBOptions& o, const ReferenceCase& c, size_t steps, std::vector<Vec>& w) {
  std::vector<Vec> m(w.size()), v(w.size());
  for (size_t i = 0; i < w.size(); ++i) m[i].assign(w[i].size(), 0.0), v[i].assign(w[i].size(), 0.0);
  for (size_t s = 0; s < steps; ++s) {
    const double t = static_cast<double>(s + 1);
    for (size_t i = 0; i < w.size(); ++i) {
      if (!c.grads[s][i]) continue;
      Vec g(c.grads[s][i]->begin(), c.grads[s][i]->end()), u(g.size());
      for (size_t k = 0; k < g.size(); ++k) {
        m[i][k] = o.beta1 * m[i][k] + (1 - o.beta1) * g[k];
        v[i][k] = o.beta2 * v[i][k] + (1 - o.beta2) * g[k] * g[k];
        double m_hat = m[i][k] / (1 - std::pow(o.beta1, t)), v_hat = v[i][k] / (1 - std::pow(o.beta2, t));
        u[k] = m_hat / (std::sqrt(v_hat) + o.eps) + o.weight_decay * w[i][k];
      }
      double phi = o.weight_norm_max > 0 ? std::min(l2(w[i]), o.weight_norm_max) : l2(w[i]);
      double ratio = phi > 0 && l2(u) > 0 ? phi / l2(u) : 1.0;
      for (size_t k = 0; k < g.size(); ++k) w[i][k] -= o.lr * ratio * u[k];
    }
  }
}

void expect_lamb_matches_reference(const optim::LAMBOptions& o) {
  ReferenceCase c = make_reference_case();
  std::vector<Tensor> params = make_params(c);
  optim::LAMB opt(params, o);
  run_steps(opt, params, c, 0, c.grads.size());
  std::vector<Vec> w = initial_weights(c);
  lamb_reference(o, c, c.grads.size(), w);
  expect_matches(params, w);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_GT(std::fabs(w[i][0] - c.init[i][0]), 1e-3) << "parameter " << i;
}

}  // namespace

TEST(Lamb, MatchesReference) { expect_lamb_matches_reference({.lr = 0.05}); }

TEST(Lamb, WeightDecayMatchesReference) {
  expect_lamb_matches_reference({.lr = 0.05, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1});
}

TEST(Lamb, ClampedWeightNormMatchesReference) {
  // ||W|| is near sqrt(12) for this case, so the clamp at 1 binds; the zero Z keeps ratio 1.
  expect_lamb_matches_reference({.lr = 0.05, .weight_decay = 0.01, .weight_norm_max = 1.0});
}

TEST(Lamb, RatioIsOneForZeroWeightOrZeroUpdate) {
  // Zero weight: ratio 1, so the first step is Adam's, lr * g / (|g| + eps).
  Tensor z = zeros({2}).set_requires_grad(true);
  // Zero gradient and no decay: u = 0, ratio 1, no movement.
  Tensor w = from_vector(std::vector<float>{3, 4}, {2}).set_requires_grad(true);
  optim::LAMB opt({z, w}, {.lr = 0.1});
  z.set_grad(from_vector(std::vector<float>{2, -0.5f}, {2}));
  w.set_grad(zeros({2}));
  opt.step();
  expect_near(z, {-0.1f * 2 / (2 + 1e-6f), 0.1f * 0.5f / (0.5f + 1e-6f)}, 1e-7f);
  expect_near(w, {3.0f, 4.0f}, 0.0f);
}

TEST(Lamb, StateDictResumesIdentically) {
  optim::LAMBOptions o{.lr = 0.05, .weight_decay = 0.01};
  ReferenceCase c = make_reference_case();
  std::vector<Tensor> a = make_params(c);
  optim::LAMB opt(a, o);
  run_steps(opt, a, c, 0, 2);
  auto saved = opt.state_dict();
  EXPECT_EQ(saved.size(), 2u + 2u * 3u);  // step, lr, and exp_avg / exp_avg_sq of three parameters
  std::vector<Tensor> b;
  for (const Tensor& p : a) b.push_back(p.clone().detach().set_requires_grad(true));
  optim::LAMB resumed(b, o);
  resumed.load_state_dict(saved);
  EXPECT_EQ(resumed.step_count(), 2);  // the bias correction continues from t = 3
  run_steps(opt, a, c, 2, 4);
  run_steps(resumed, b, c, 2, 4);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].to_vector<float>(), b[i].to_vector<float>()) << "parameter " << i;
}

TEST(Lamb, RejectsBadOptions) {
  Tensor p = zeros({2}).set_requires_grad(true);
  expect_error<ValueError>([&] { optim::LAMB({p}, {.beta1 = 1.0}); }, {"[LAMB]", "betas"});
  expect_error<ValueError>([&] { optim::LAMB({p}, {.weight_norm_max = -1.0}); }, {"[LAMB]", "weight_norm_max"});
}
