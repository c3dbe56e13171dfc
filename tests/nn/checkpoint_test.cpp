// Activation checkpointing: gradients equal the plain run's (the recompute draws the same dropout
// masks), the activations kept between forward and backward shrink, and DDP's and ZeRO's hooks fire
// from the recompute as they do from a plain backward.
#include <gtest/gtest.h>

#include "parallel/ddp/ddp_testing.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/core/cpu_allocator.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/checkpoint.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/parallel/zero/zero_data_parallel.h"

namespace tessera {
namespace {

std::shared_ptr<nn::CharTransformer> gpt(bool checkpointed, float dropout) {
  manual_seed(5);
  nn::CharTransformerConfig c;
  c.vocab_size = 13, c.context = 16, c.embed_dim = 32, c.heads = 4, c.layers = 3, c.dropout = dropout;
  c.checkpoint_activations = checkpointed;
  return std::make_shared<nn::CharTransformer>(c);
}

Tensor lm_loss(nn::Module& model, const Tensor& ids, const Tensor& targets) {
  Tensor out = model(ids);
  return cross_entropy(reshape(out, {-1, out.shape()[2]}), reshape(targets, {-1}));
}

TEST(ActivationCheckpointing, GradientsEqualThePlainRunWithDropout) {
  Generator gen(1);
  Tensor ids = randint(0, 13, {4, 16}, gen), targets = randint(0, 13, {4, 16}, gen);
  auto plain = gpt(false, 0.1f), checkpointed = gpt(true, 0.1f);
  manual_seed(9);
  Tensor a = lm_loss(*plain, ids, targets);
  a.backward();
  manual_seed(9);
  Tensor b = lm_loss(*checkpointed, ids, targets);
  b.backward();
  EXPECT_EQ(a.item<float>(), b.item<float>());
  auto pa = plain->named_parameters(), pb = checkpointed->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    auto ga = pa[i].second.grad().to_vector<float>(), gb = pb[i].second.grad().to_vector<float>();
    ASSERT_EQ(ga.size(), gb.size());
    for (size_t k = 0; k < ga.size(); ++k) ASSERT_EQ(ga[k], gb[k]) << pa[i].first << "[" << k << "]";
  }
}

TEST(ActivationCheckpointing, FiniteDifferencesThroughACheckpointedFunction) {
  // Both the input and the parameter fn reads (whose gradient comes from the recompute) are checked.
  Generator gen(2);
  auto fn = [](const std::vector<Tensor>& in) {
    const Tensor w = in[1];
    return nn::checkpoint([w](const Tensor& x) { return tanh(matmul(x, w)); }, in[0], {w});
  };
  auto r = autograd::gradcheck(fn, {randn({2, 3}, gen), randn({3, 3}, gen)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(ActivationCheckpointing, KeepsLessBetweenForwardAndBackward) {
  // The bytes live after forward (the graph's saved activations) with and without checkpointing.
  Generator gen(3);
  Tensor ids = randint(0, 13, {16, 16}, gen), targets = randint(0, 13, {16, 16}, gen);
  auto held_after_forward = [&](bool checkpointed) {
    auto model = gpt(checkpointed, 0.0f);
    cpu_allocator::empty_cache();
    const size_t before = cpu_allocator::allocated_bytes();
    Tensor loss = lm_loss(*model, ids, targets);
    const size_t after = cpu_allocator::allocated_bytes();
    loss.backward();
    return after - before;
  };
  const size_t plain = held_after_forward(false), checkpointed = held_after_forward(true);
  EXPECT_LT(checkpointed * 2, plain) << "plain " << plain << " bytes, checkpointed " << checkpointed;
}

TEST(ActivationCheckpointing, ZeroStage2TrainsACheckpointedModelAsAPlainOne) {
  Generator gen(4);
  Tensor ids = randint(0, 13, {4, 16}, gen), targets = randint(0, 13, {4, 16}, gen);
  std::vector<nn::StateDict> results;
  for (bool checkpointed : {false, true}) {
    std::vector<std::shared_ptr<nn::Module>> models{gpt(checkpointed, 0.0f), gpt(checkpointed, 0.0f)};
    nn::StateDict out;
    testing::run_on_threads(2, testing::threaded(2), [&](dist::ProcessGroup& group) {
      const int r = group.rank();
      parallel::zero::ZeroDataParallel zero(models[static_cast<size_t>(r)], testing::borrow(group), {.stage = 2});
      optim::Adam opt(zero.parameters(), {.lr = 0.01});
      for (int step = 0; step < 3; ++step) {
        Tensor part = ids.slice(0, 2 * r, 2 * r + 2).contiguous(), t = targets.slice(0, 2 * r, 2 * r + 2).contiguous();
        Tensor o = zero(part);
        cross_entropy(reshape(o, {-1, 13}), reshape(t, {-1})).backward();
        zero.step(opt);
      }
      nn::StateDict state = zero.full_state_dict();
      if (r == 0) out = state;
    });
    results.push_back(out);
  }
  double worst = 0;
  for (size_t i = 0; i < results[0].size(); ++i) {
    auto a = results[0][i].second.to_vector<float>(), b = results[1][i].second.to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::fabs(double(a[k]) - b[k]));
  }
  EXPECT_EQ(worst, 0.0);
}

}  // namespace
}  // namespace tessera
