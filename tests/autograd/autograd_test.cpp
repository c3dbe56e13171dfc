#include <gtest/gtest.h>

#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/checkpoint.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

using namespace tessera;
using tessera::testing::expect_error;
using tessera::testing::expect_near;

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = from_vector(std::vector<float>{1, 2, 3}, {3}).set_requires_grad(true);
  sum(mul(x, x)).backward();
  expect_near(x.grad(), {2, 4, 6});
  sum(mul(x, 3.0f)).backward();
  expect_near(x.grad(), {5, 7, 9});
}

TEST(Autograd, BackwardWithGivenGradient) {
  Tensor x = from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor y = mul(x, x);
  y.backward(from_vector(std::vector<float>{1, 10}, {2}));
  expect_near(x.grad(), {2, 40});
  expect_error<ValueError>([] {
    Tensor z = ones({2}).set_requires_grad(true);
    mul(z, 2.0f).backward();
  }, {"[backward]", "non-scalar"});
}

TEST(Autograd, SharedSubexpressionIsSummed) {
  Tensor x = from_vector(std::vector<float>{2}, {1}).set_requires_grad(true);
  Tensor y = mul(x, 3.0f);
  Tensor z = add(mul(y, y), y);  // 9x² + 3x → 18x + 3
  sum(z).backward();
  expect_near(x.grad(), {39});
}

TEST(Autograd, RetainGraphAllowsSecondBackward) {
  Tensor x = from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor y = sum(exp(x));
  y.backward(Tensor(), true);
  y.backward();
  expect_near(x.grad(), {2 * std::exp(1.0f), 2 * std::exp(2.0f)}, 1e-4f);
  expect_error<ValueError>([&] { y.backward(); }, {"second time", "retain_graph"});
}

TEST(Autograd, NoGradAndDetachRecordNothing) {
  Tensor x = ones({2}).set_requires_grad(true);
  {
    NoGradGuard guard;
    Tensor y = mul(x, 2.0f);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
  }
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage_with(x));
  Tensor y = add(mul(x, 2.0f), mul(d, 5.0f));
  sum(y).backward();
  expect_near(x.grad(), {2, 2});
}

TEST(Autograd, GradReadyHookFiresOnceWithFinalGradientInReverseOrder) {
  // A parameter used twice: its hook must fire once, after both uses have accumulated.
  manual_seed(0);
  nn::Linear l1(3, 4), l2(4, 2);
  std::vector<std::string> order;
  std::vector<float> seen_shared;
  Tensor shared = from_vector(std::vector<float>{1, 1}, {2}).set_requires_grad(true);
  l1.weight.register_grad_ready_hook([&](const Tensor&) { order.push_back("l1.weight"); });
  l2.weight.register_grad_ready_hook([&](const Tensor&) { order.push_back("l2.weight"); });
  shared.register_grad_ready_hook([&](const Tensor& p) {
    order.push_back("shared");
    seen_shared = p.grad().to_vector<float>();
  });
  Tensor x = randn({5, 3});
  Tensor h = l2(relu(l1(x)));
  Tensor out = sum(add(mul(h, shared), mul(h, shared)));
  out.backward();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0], "shared");
  EXPECT_EQ(order[1], "l2.weight");
  EXPECT_EQ(order[2], "l1.weight");
  // The hook saw the final, summed gradient.
  EXPECT_EQ(seen_shared, shared.grad().to_vector<float>());
  expect_near(shared.grad(), mul(sum(h, {0}), 2.0f).to_vector<float>(), 1e-4f);
}

TEST(Autograd, UnusedInputGetsNoGradient) {
  Tensor a = ones({2}).set_requires_grad(true), b = ones({2}).set_requires_grad(true);
  sum(mul(a, 2.0f)).backward();
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(Autograd, SetRequiresGradOnNonLeafIsAnError) {
  Tensor a = ones({2}).set_requires_grad(true);
  Tensor b = mul(a, 2.0f);
  expect_error<ValueError>([&] { b.set_requires_grad(false); }, {"leaf"});
  expect_error<ValueError>([] { arange(3).set_requires_grad(true); }, {"float32"});
}

TEST(Autograd, InPlaceChangeOfASavedInputIsDetected) {
  // The classic silent bug: the optimizer updates the weights between forward and backward.
  nn::Linear layer(3, 2);
  Tensor loss = sum(layer(ones({4, 3})));
  {
    NoGradGuard no_grad;
    add_(layer.weight, ones({2, 3}), 0.1f);
  }
  expect_error<ValueError>([&] { loss.backward(); }, {"LinearBackward", "modified in place", "[2, 3]"});

  // An op whose backward does not read its inputs (add) is unaffected.
  Tensor a = ones({2}).set_requires_grad(true), b = ones({2}).set_requires_grad(true);
  Tensor y = sum(add(a, b));
  {
    NoGradGuard no_grad;
    fill_(a, 5.0f);
  }
  y.backward();
  expect_near(a.grad(), {1, 1});
}

// A linear layer writes its weight gradient straight into the weight's gradient buffer (DDP's bucket
// slot) when AccumulateGrad would copy it there; a weight used twice in one backward gets a fresh
// tensor for its second use, so the two gradients are summed, not written over each other; a leaf
// without a buffer keeps the product's fresh gradient without a copy. Each equals the gradient of
// the same graph without any of this.
TEST(Autograd, GradientsGoStraightIntoTheirBufferAndATwiceUsedWeightIsStillSummed) {
  Generator gen(5);
  Tensor x1 = randn({4, 3}, gen), x2 = randn({4, 3}, gen), w0 = randn({2, 3}, gen);
  auto grad_of = [&](bool twice, bool with_buffer, Tensor* buffer_out) {
    Tensor w = w0.clone().set_requires_grad(true);
    Tensor buffer = zeros({2, 3});
    if (with_buffer) w.set_grad_buffer(buffer);
    Tensor y = linear(x1, w);
    if (twice) y = add(y, linear(x2, w));
    sum(mul(y, y)).backward();
    if (buffer_out) *buffer_out = buffer;
    return w.grad();
  };
  for (bool twice : {false, true}) {
    // The reference: the same product written out, which never writes into a buffer.
    Tensor w = w0.clone().set_requires_grad(true);
    Tensor y = matmul(x1, transpose(w, 0, 1));
    if (twice) y = add(y, matmul(x2, transpose(w, 0, 1)));
    sum(mul(y, y)).backward();
    const std::vector<float> want = w.grad().to_vector<float>();
    Tensor buffer;
    Tensor in_buffer = grad_of(twice, true, &buffer);
    // Used once, the gradient is the buffer; used twice, it is the sum of the two (which DDP moves
    // into its slot as it does any kept gradient).
    if (!twice) {
      EXPECT_TRUE(in_buffer.shares_storage_with(buffer));
    }
    expect_near(in_buffer, want, 1e-5);
    expect_near(grad_of(twice, false, nullptr), want, 1e-5);
  }
}

// A weight used outside and inside a checkpointed block: the outer linear's gradient goes into the
// weight's buffer and waits there while the block's recomputed backward (a nested pass) delivers its
// own gradient; that one must not be copied over the waiting one. Both are summed, as without a buffer.
TEST(Autograd, ANestedBackwardDoesNotWriteOverAGradientWaitingInTheBuffer) {
  Generator gen(9);
  Tensor x = randn({4, 3}, gen), w0 = randn({3, 3}, gen);
  auto grad_of = [&](bool with_buffer) {
    Tensor w = w0.clone().set_requires_grad(true);
    if (with_buffer) w.set_grad_buffer(zeros({3, 3}));
    Tensor inner = nn::checkpoint([&](const Tensor& h) { return relu(linear(h, w)); }, x, {w});
    sum(mul(linear(inner, w), 2.0f)).backward();
    return w.grad().to_vector<float>();
  };
  expect_near(from_vector(grad_of(true), {3, 3}), grad_of(false), 1e-5);
}
