// Optimizer updates against torch.optim (PyTorch 1.13) on the same parameters and gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/nn/layers.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/sgd.h"
#include "testing/expect.h"

using namespace tessera;
using tessera::testing::expect_near;

namespace {
// Three steps with fixed gradients, as in the PyTorch reference script.
template <typename MakeOpt>
std::vector<float> run_three_steps(MakeOpt make) {
  Tensor p = from_vector(std::vector<float>{1, -2, 3}, {3}).set_requires_grad(true);
  auto opt = make(std::vector<Tensor>{p});
  std::vector<std::vector<float>> grads{{0.1f, 0.2f, -0.3f}, {0.5f, -0.1f, 0.2f}, {-0.2f, 0.3f, 0.4f}};
  for (auto& g : grads) {
    p.set_grad(from_vector(g, {3}));
    opt->step();
  }
  return p.to_vector<float>();
}
}  // namespace

TEST(Optim, SgdNesterovWeightDecayMatchesTorch) {
  auto p = run_three_steps([](std::vector<Tensor> ps) {
    return std::make_unique<optim::SGD>(ps, optim::SGDOptions{0.1, 0.9, 0.0, 0.01, true});
  });
  expect_near(from_vector(p, {3}), {0.8603582978f, -2.0824398994f, 2.9486284256f});
}

TEST(Optim, SgdDampeningMatchesTorch) {
  auto p = run_three_steps([](std::vector<Tensor> ps) {
    return std::make_unique<optim::SGD>(ps, optim::SGDOptions{0.1, 0.9, 0.5, 0.0, false});
  });
  expect_near(from_vector(p, {3}), {0.9354000092f, -2.0597000122f, 3.0422999859f});
}

TEST(Optim, AdamMatchesTorch) {
  auto p = run_three_steps([](std::vector<Tensor> ps) {
    return std::make_unique<optim::Adam>(ps, optim::AdamOptions{0.1, 0.9, 0.999, 1e-8, 0.01});
  });
  expect_near(from_vector(p, {3}), {0.7721967101f, -2.1711871624f, 3.0544421673f});
}

TEST(Optim, AdamWMatchesTorch) {
  auto p = run_three_steps([](std::vector<Tensor> ps) {
    return std::make_unique<optim::AdamW>(ps, optim::AdamOptions{0.1, 0.9, 0.999, 1e-8, 0.1});
  });
  expect_near(from_vector(p, {3}), {0.7484232187f, -2.1285076141f, 2.9832227230f});
}

TEST(Optim, StateDictResumesIdentically) {
  // Two steps, save, one more step; versus a fresh optimizer loaded from the save.
  Tensor a = from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  optim::Adam opt({a}, optim::AdamOptions{0.1});
  for (int i = 0; i < 2; ++i) {
    a.set_grad(from_vector(std::vector<float>{0.3f, -0.7f}, {2}));
    opt.step();
  }
  auto saved_state = opt.state_dict();
  Tensor b = a.clone().detach().set_requires_grad(true);
  optim::Adam resumed({b}, optim::AdamOptions{0.1});
  resumed.load_state_dict(saved_state);
  EXPECT_EQ(resumed.step_count(), 2);
  a.set_grad(from_vector(std::vector<float>{0.5f, 0.1f}, {2}));
  b.set_grad(from_vector(std::vector<float>{0.5f, 0.1f}, {2}));
  opt.step();
  resumed.step();
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
}

TEST(Optim, ClipGradNorm) {
  Tensor a = zeros({2}).set_requires_grad(true), b = zeros({1}).set_requires_grad(true);
  a.set_grad(from_vector(std::vector<float>{3, 0}, {2}));
  b.set_grad(from_vector(std::vector<float>{4}, {1}));
  double n = optim::clip_grad_norm({a, b}, 1.0);
  EXPECT_NEAR(n, 5.0, 1e-6);
  expect_near(a.grad(), {0.6f, 0.0f}, 1e-5f);
  expect_near(b.grad(), {0.8f}, 1e-5f);
}

TEST(LRScheduler, StepCosineWarmup) {
  Tensor p = zeros({1}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions{1.0});
  optim::StepLR step_lr(opt, 2, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 5; ++i) {
    lrs.push_back(opt.lr());
    step_lr.step();
  }
  EXPECT_EQ(lrs, (std::vector<double>{1, 1, 0.5, 0.5, 0.25}));

  optim::SGD opt2({p}, optim::SGDOptions{0.1});
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt2, 10, 0.0);
  optim::LinearWarmupLR warm(opt2, 4, 0.0, cosine);
  warm.set_position(0);
  EXPECT_NEAR(opt2.lr(), 0.0, 1e-12);
  warm.set_position(2);
  EXPECT_NEAR(opt2.lr(), 0.05, 1e-12);
  warm.set_position(4);
  EXPECT_NEAR(opt2.lr(), 0.1, 1e-12);
  warm.set_position(9);  // cosine at 5/10: half way
  EXPECT_NEAR(opt2.lr(), 0.05, 1e-9);
  warm.set_position(14);
  EXPECT_NEAR(opt2.lr(), 0.0, 1e-12);
}

TEST(Training, MlpLearnsSyntheticClassification) {
  // End to end: a small MLP fits a separable synthetic problem with SGD+momentum.
  manual_seed(0);
  Generator g(11);
  Tensor x = randn({256, 10}, g);
  std::vector<int64_t> labels(256);
  for (int i = 0; i < 256; ++i) labels[i] = x.data<float>()[i * 10] + x.data<float>()[i * 10 + 1] > 0 ? 1 : 0;
  Tensor y = from_vector(labels, {256});
  nn::Sequential model{std::make_shared<nn::Linear>(10, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 2)};
  optim::SGD opt(model.parameters(), optim::SGDOptions{0.1, 0.9});
  float first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    if (step == 0) first = loss.item<float>();
    last = loss.item<float>();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(last, 0.25f * first);
  Tensor pred = argmax(model(x), 1);
  int correct = 0;
  for (int i = 0; i < 256; ++i) correct += pred.to_vector<int64_t>()[i] == labels[i];
  EXPECT_GE(correct, 240);
}
