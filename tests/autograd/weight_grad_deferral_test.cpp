// Deferred weight gradients (ZB-H1's B/W split): under DeferWeightGrads, linear's backward gives the
// input gradient at once and queues the weight and bias gradients, which the queue's run adds to the
// leaves (with their grad-ready hooks); the result equals an ordinary backward, in float32 and bf16.
#include <gtest/gtest.h>

#include "tessera/autograd/autocast.h"
#include "tessera/autograd/weight_grad_deferral.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

namespace tessera {
namespace {

struct Grads {
  std::vector<float> x, w1, b1, w2;
};

// x -> linear(w1, b1) -> tanh -> linear(w2, no bias) -> sum of squares, all gradients.
Grads run(bool defer, DType precision, int* hooks_before_run = nullptr, int* hooks_after_run = nullptr) {
  Generator gen(11);
  Tensor x = randn({5, 4}, gen).set_requires_grad(true);
  Tensor w1 = randn({3, 4}, gen).set_requires_grad(true), b1 = randn({3}, gen).set_requires_grad(true);
  Tensor w2 = randn({2, 3}, gen).set_requires_grad(true);
  int hooks = 0;
  w1.register_grad_ready_hook([&hooks](const Tensor&) { ++hooks; });
  Tensor loss;
  {
    Autocast autocast(precision);
    Tensor y = linear(tanh(linear(x, w1, b1)), w2, Tensor());
    loss = sum(mul(y, y));
  }
  autograd::WeightGradQueue queue;
  if (defer) {
    {
      autograd::DeferWeightGrads scope(queue);
      loss.backward();
    }
    EXPECT_EQ(queue.size(), 2u);  // one per linear
    EXPECT_TRUE(x.grad().defined());
    EXPECT_FALSE(w1.grad().defined());
    EXPECT_FALSE(b1.grad().defined());
    EXPECT_FALSE(w2.grad().defined());
    if (hooks_before_run) *hooks_before_run = hooks;
    queue.run();
    EXPECT_TRUE(queue.empty());
    if (hooks_after_run) *hooks_after_run = hooks;
  } else {
    loss.backward();
  }
  return {x.grad().to_vector<float>(), w1.grad().to_vector<float>(), b1.grad().to_vector<float>(),
          w2.grad().to_vector<float>()};
}

TEST(WeightGradDeferral, LinearQueuesWeightAndBiasGradientsThatEqualAnOrdinaryBackward) {
  for (DType precision : {DType::Float32, DType::BFloat16}) {
    const Grads want = run(false, precision);
    int before = -1, after = -1;
    const Grads got = run(true, precision, &before, &after);
    EXPECT_EQ(got.x, want.x);  // the same products in the same order: bit for bit
    EXPECT_EQ(got.w1, want.w1);
    EXPECT_EQ(got.b1, want.b1);
    EXPECT_EQ(got.w2, want.w2);
    EXPECT_EQ(before, 0) << "the weight's grad-ready hook ran before its gradient existed";
    EXPECT_EQ(after, 1);
  }
}

TEST(WeightGradDeferral, AWeightThatIsNotALeafGetsItsGradientAtOnce) {
  Generator gen(3);
  Tensor x = randn({2, 3}, gen);
  Tensor w = randn({4, 3}, gen).set_requires_grad(true);
  autograd::WeightGradQueue queue;
  {
    Tensor loss = sum(linear(x, mul(w, 2.0f), Tensor()));  // the weight is computed from w
    autograd::DeferWeightGrads scope(queue);
    loss.backward();
  }
  EXPECT_TRUE(queue.empty());
  ASSERT_TRUE(w.grad().defined());
  // d/dw sum(x (2w)^T) = 2 * column sums of x, for every row of w.
  const auto xs = x.to_vector<float>();
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_NEAR(w.grad().to_vector<float>()[o * 3 + i], 2.0f * (xs[i] + xs[3 + i]), 1e-5f);
}

TEST(WeightGradDeferral, WithoutAScopeNothingIsDeferredAndScopesNest) {
  EXPECT_EQ(autograd::deferred_weight_grads(), nullptr);
  autograd::WeightGradQueue outer, inner;
  {
    autograd::DeferWeightGrads a(outer);
    EXPECT_EQ(autograd::deferred_weight_grads(), &outer);
    {
      autograd::DeferWeightGrads b(inner);
      EXPECT_EQ(autograd::deferred_weight_grads(), &inner);
    }
    EXPECT_EQ(autograd::deferred_weight_grads(), &outer);
  }
  EXPECT_EQ(autograd::deferred_weight_grads(), nullptr);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// ZB-H1 under DDP: the weights have gradient buffers (bucket slots), and the deferred W passes of
// two micro-batches write the first weight gradient straight into the slot and add the second to
// it. The gradients equal two ordinary backward passes without buffers, bit for bit, in float32 and
// bf16, and .grad is the slot.
TEST(WeightGradDeferral, DeferredWeightGradientsGoIntoTheirBufferAndAccumulateAcrossMicrobatches) {
  for (DType precision : {DType::Float32, DType::BFloat16}) {
    auto grads = [&](bool defer_into_buffers, Tensor* w_out, Tensor* buffer_out) {
      Generator gen(21);
      Tensor w = randn({3, 4}, gen).set_requires_grad(true);
      Tensor buffer = zeros({3, 4});
      if (defer_into_buffers) w.set_grad_buffer(buffer);
      for (int microbatch = 0; microbatch < 2; ++microbatch) {
        Tensor x = randn({5, 4}, gen);
        Tensor loss;
        {
          Autocast autocast(precision);
          Tensor y = linear(x, w, Tensor());
          loss = sum(mul(y, y));
        }
        autograd::WeightGradQueue queue;
        if (defer_into_buffers) {
          {
            autograd::DeferWeightGrads scope(queue);
            loss.backward();
          }
          queue.run();
        } else {
          loss.backward();
        }
      }
      if (w_out) *w_out = w;
      if (buffer_out) *buffer_out = buffer;
      return w.grad().to_vector<float>();
    };
    const std::vector<float> want = grads(false, nullptr, nullptr);
    Tensor w, buffer;
    EXPECT_EQ(grads(true, &w, &buffer), want) << dtype_name(precision);
    EXPECT_TRUE(w.grad().shares_storage_with(buffer)) << dtype_name(precision);
  }
}

}  // namespace
}  // namespace tessera
