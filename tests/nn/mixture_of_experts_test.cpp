// The mixture of experts (nn/mixture_of_experts.h): the routing plan, forward against a token-by-token
// reference, finite-difference gradients, the load-balancing loss, and expert parallelism on threads
// against one process holding every expert.
#include <gtest/gtest.h>

#include "dist/collective_suite.h"
#include "parallel/tensor/tp_testing.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/nn/expert_routing.h"
#include "tessera/nn/mixture_of_experts.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using nn::ExpertRouting;
using nn::MixtureOfExperts;
using nn::MoeConfig;

TEST(ExpertRouting, TopKTiesToTheLowerIndexAndFirstChoicesBeforeSecond) {
  // 3 tokens, 3 experts, top 2, capacity 2.
  const std::vector<float> probs = {0.5f, 0.3f, 0.2f,   // token 0: experts 0, 1
                                    0.4f, 0.4f, 0.2f,   // token 1: tie -> 0, 1
                                    0.6f, 0.1f, 0.3f};  // token 2: experts 0, 2
  ExpertRouting r = nn::route_tokens(probs.data(), 3, 3, 2, 2);
  EXPECT_EQ(r.choice, (std::vector<int64_t>{0, 1, 0, 1, 0, 2}));
  EXPECT_EQ(r.chosen, (std::vector<int64_t>{3, 2, 1}));
  // Expert 0 has room for two first choices: tokens 0 and 1; token 2's first choice is dropped, and
  // the second choices (1, 1, 2) all fit.
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ(r.slot, (std::vector<int64_t>{0, 2, 1, 3, 6, 4}));
  EXPECT_EQ(r.slot_token, (std::vector<int64_t>{0, 1, 0, 1, 2, 3}));
  EXPECT_EQ(nn::expert_capacity(8, 4, 2, 1.0), 4);
  EXPECT_EQ(nn::expert_capacity(8, 4, 2, 1.25), 5);
  EXPECT_EQ(nn::expert_capacity(0, 4, 1, 1.0), 1);
  testing::expect_error<ValueError>([&] { nn::route_tokens(probs.data(), 3, 3, 4, 2); }, {"[moe]", "top_k 4"});
}

// Expert e's part of a stacked tensor.
Tensor of_expert(const Tensor& stacked, int64_t e) { return squeeze(slice(stacked, 0, e, e + 1), 0); }

// One expert's MLP on one token row, written out.
Tensor expert_mlp(const MixtureOfExperts& moe, int64_t e, const Tensor& row) {
  Tensor h = gelu(add(matmul(row, of_expert(moe.fc_weight, e)), of_expert(moe.fc_bias, e)));
  return add(matmul(h, of_expert(moe.proj_weight, e)), of_expert(moe.proj_bias, e));
}

TEST(MixtureOfExperts, ForwardIsTheGatedSumOfEachTokensExpertsAndDropsOverCapacity) {
  for (double capacity_factor : {4.0, 0.5}) {
    Generator gen(3);
    manual_seed(7);
    MixtureOfExperts moe(6, 10, MoeConfig{4, 2, capacity_factor, 0.0});
    moe.eval();
    Tensor x = randn({2, 5, 6}, gen);
    Tensor y = moe.forward(x);
    ASSERT_EQ(y.shape(), x.shape());
    NoGradGuard no_grad;
    Tensor rows = reshape(x, {10, 6});
    Tensor probs = softmax(moe.router->forward(rows), 1);
    const int64_t capacity = nn::expert_capacity(10, 4, 2, capacity_factor);
    ExpertRouting r = nn::route_tokens(contiguous(probs).data<float>(), 10, 4, 2, capacity);
    if (capacity_factor < 1) EXPECT_GT(r.dropped, 0);
    else EXPECT_EQ(r.dropped, 0);
    Tensor flat = reshape(y, {10, 6});
    for (int64_t t = 0; t < 10; ++t) {
      const int64_t a = r.choice[t * 2], b = r.choice[t * 2 + 1];
      const float pa = probs.data<float>()[t * 4 + a], pb = probs.data<float>()[t * 4 + b];
      Tensor row = rows.slice(0, t, t + 1), expected = zeros({1, 6});
      if (r.slot[t * 2] < 4 * capacity) add_(expected, expert_mlp(moe, a, row), pa / (pa + pb));
      if (r.slot[t * 2 + 1] < 4 * capacity) add_(expected, expert_mlp(moe, b, row), pb / (pa + pb));
      testing::expect_close(flat.slice(0, t, t + 1), expected, 1e-5f, "token " + std::to_string(t));
    }
  }
}

TEST(MixtureOfExperts, GradientsMatchFiniteDifferences) {
  manual_seed(11);
  MixtureOfExperts moe(4, 6, MoeConfig{3, 2, 1.0, 0.0});
  Generator gen(5);
  Tensor x = randn({6, 4}, gen);
  // Every expert takes part, and central differences of 1e-2 never change a token's choices (the
  // router's probabilities are apart by more than that moves them).
  auto f = [&](const std::vector<Tensor>& in) { return moe.forward(in[0]); };
  auto result = autograd::gradcheck(f, {x, moe.fc_weight, moe.fc_bias, moe.proj_weight, moe.proj_bias,
                                        moe.router->weight}, {1e-3, 2e-3, 3e-2});
  EXPECT_TRUE(result.ok) << result.message;
}

TEST(MixtureOfExperts, LoadBalancingLossIsItsWeightAtAnEvenSpreadAndHasTheSwitchGradient) {
  manual_seed(2);
  MixtureOfExperts moe(4, 8, MoeConfig{4, 1, 2.0, 0.5});
  {
    NoGradGuard no_grad;
    fill_(moe.router->weight, 0.0f);  // uniform probabilities
  }
  Generator gen(1);
  moe.forward(randn({8, 4}, gen));
  Tensor aux = moe.take_auxiliary_loss();
  ASSERT_TRUE(aux.defined());
  // P_e = 1/4 for every expert, Σ f_e = 1: aux = 0.5 · 4 · (1/4) = 0.5 whatever the choices.
  EXPECT_NEAR(aux.item<float>(), 0.5f, 1e-6);
  EXPECT_FALSE(moe.take_auxiliary_loss().defined());  // handed over once
  EXPECT_EQ(moe.last_routing().choices, 8);
  // Its gradient with respect to the router, against finite differences (the choices held fixed).
  Tensor x = randn({8, 4}, gen);
  {
    NoGradGuard no_grad;
    copy_(moe.router->weight, randn({4, 4}, gen));
  }
  // The loss is made only with gradients on; gradcheck's differences run with them off.
  auto f = [&](const std::vector<Tensor>&) {
    const bool recording = autograd::grad_enabled();
    autograd::set_grad_enabled(true);
    moe.forward(x);
    Tensor aux = moe.take_auxiliary_loss();
    autograd::set_grad_enabled(recording);
    return recording ? aux : aux.detach();
  };
  auto result = autograd::gradcheck(f, {moe.router->weight}, {1e-3, 1e-3, 2e-2});
  EXPECT_TRUE(result.ok) << result.message;
}

// Two ranks, each with its own tokens: experts spread (2 each of 4) and routing pooled over both,
// against one process holding every expert on both ranks' tokens. The sum of both ranks' losses is
// the one process's loss, so each expert's gradient equals the one process's, and the router's
// (replicated) gradients add up to it.
TEST(MixtureOfExpertsParallel, SpreadExpertsOnThreadsEqualOneProcessHoldingThemAll) {
  const int world = 2;
  const MoeConfig config{4, 2, 4.0, 0.1};  // capacity enough for every token: nothing dropped
  Generator gen(9);
  std::vector<Tensor> xs, rs;
  for (int r = 0; r < world; ++r) {
    xs.push_back(randn({3, 2, 6}, gen));
    rs.push_back(randn({3, 2, 6}, gen));
  }
  manual_seed(21);
  MixtureOfExperts whole(6, 8, config);
  Tensor loss;
  for (int r = 0; r < world; ++r) {
    Tensor y = whole.forward(xs[r]);
    // Each rank pools its routing over both: its balancing loss is that of both ranks' tokens at once.
    Tensor part = sum(mul(y, rs[r]));
    loss = loss.defined() ? add(loss, part) : part;
  }
  {
    // The one-process balancing loss over all tokens, counted once per rank.
    Tensor both = cat({reshape(xs[0], {6, 6}), reshape(xs[1], {6, 6})}, 0);
    whole.take_auxiliary_loss();
    Tensor y = whole.forward(both);
    loss = add(loss, mul(whole.take_auxiliary_loss(), static_cast<float>(world)));
    (void)y;
  }
  loss.backward();
  std::vector<Tensor> outputs(world);
  {
    NoGradGuard no_grad;
    for (int r = 0; r < world; ++r) outputs[r] = whole.forward(xs[r]);
  }
  std::vector<Tensor> router_grads(world);
  std::vector<std::unique_ptr<MixtureOfExperts>> ranks;  // built here: construction draws from the global generator
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<MixtureOfExperts>(6, 8, config));
    ranks.back()->load_state_dict(whole.state_dict());
  }
  testing::run_on_threads(world, testing::threaded(world), [&](dist::ProcessGroup& g) {
    MixtureOfExperts& moe = *ranks[g.rank()];
    auto group = testing::borrow(g);
    auto stats = g.new_group({0, 1});
    moe.place_experts(group);
    moe.pool_routing_over(stats);
    EXPECT_EQ(moe.local_experts(), 2);
    Tensor y = moe.forward(xs[g.rank()]);
    testing::expect_close(y, outputs[g.rank()], 1e-5f, "rank " + std::to_string(g.rank()) + "'s output");
    add(sum(mul(y, rs[g.rank()])), moe.take_auxiliary_loss()).backward();
    const int64_t first = 2 * g.rank();
    testing::expect_close(moe.fc_weight.grad(), whole.fc_weight.grad().slice(0, first, first + 2), 1e-4f, "fc_weight");
    testing::expect_close(moe.proj_bias.grad(), whole.proj_bias.grad().slice(0, first, first + 2), 1e-4f, "proj_bias");
    router_grads[g.rank()] = moe.router->weight.grad().clone();
  });
  // The reference's router gradient holds both ranks' task gradients and the pooled balancing
  // loss's, as the two ranks' gradients do together.
  testing::expect_close(add(router_grads[0], router_grads[1]), whole.router->weight.grad(), 1e-4f, "router");
}

}  // namespace
}  // namespace tessera
