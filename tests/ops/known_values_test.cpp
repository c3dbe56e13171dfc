// Forward results against values computed with PyTorch 1.13 (torch.nn.functional) on the same inputs.
#include <gtest/gtest.h>

#include "tessera/ops/ops.h"
#include "testing/expect.h"

using namespace tessera;
using tessera::testing::expect_near;

TEST(KnownValues, Activations) {
  Tensor x = from_vector(std::vector<float>{-1.0f, 0.0f, 0.5f, 2.0f}, {1, 4});
  expect_near(gelu(x), {-0.1586552858f, 0.0f, 0.3457311988f, 1.9544999599f});
  expect_near(softmax(x, -1), {0.0353537947f, 0.0961015746f, 0.1584447175f, 0.7100999355f});
  expect_near(relu(x), {0, 0, 0.5f, 2.0f});
  expect_near(sigmoid(x), {0.26894142f, 0.5f, 0.62245933f, 0.88079708f});
}

TEST(KnownValues, CrossEntropyWithSmoothingAndIgnore) {
  Tensor logits = from_vector(std::vector<float>{1.0f, 2.0f, 0.5f, 0.1f, -1.0f, 3.0f, 0, 0, 0}, {3, 3});
  Tensor target = from_vector(std::vector<int64_t>{1, 2, -100}, {3});
  EXPECT_NEAR(cross_entropy(logits, target, {-100, 0.2f}).item<float>(), 0.5809048414f, 1e-5);
}

TEST(KnownValues, LayerNorm) {
  expect_near(layer_norm(from_vector(std::vector<float>{1, 2, 4}, {1, 3}), {3}), {-1.0690413713f, -0.2672603130f, 1.3363018036f});
}

TEST(KnownValues, Conv2dWithPaddingAndBias) {
  Tensor x = reshape(arange(16, DType::Float32), {1, 1, 4, 4});
  Tensor w = from_vector(std::vector<float>{1, 0, -1, 2}, {1, 1, 2, 2});
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  expect_near(conv2d(x, w, from_vector(std::vector<float>{0.5f}, {1}), o),
              {0.5, 2.5, 3.5, 4.5, -2.5, 8.5, 6.5, 8.5, 10.5, -3.5, 16.5, 14.5, 16.5, 18.5, -3.5, 24.5, 22.5, 24.5, 26.5,
               -3.5, 0.5, 12.5, 13.5, 14.5, 15.5});
}

TEST(KnownValues, AvgPoolCountsPadding) {
  Tensor x = reshape(arange(16, DType::Float32), {1, 1, 4, 4});
  expect_near(avg_pool2d(x, Pool2dOptions{3, 3, 2, 2, 1, 1}), {1.1111111641f, 2.6666667461f, 5.6666665077f, 10.0f});
  expect_near(max_pool2d(x), {5, 7, 13, 15});
}

TEST(KnownValues, BatchNormTrainingUpdatesRunningStats) {
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 6, 5, 1}, {3, 2});
  Tensor rm = zeros({2}), rv = ones({2});
  Tensor y = batch_norm(x, rm, rv, ones({2}), zeros({2}), true);
  expect_near(y, {-1.2247426510f, -0.4629095197f, 0.0f, 1.3887286186f, 1.2247424126f, -0.9258190394f}, 1e-4f);
  expect_near(rm, {0.3f, 0.3f});
  expect_near(rv, {1.3f, 1.6f});
}

TEST(KnownValues, ReductionsAndMatmul) {
  Tensor t = from_vector(std::vector<float>{1, 5, 3, 4, 2, 6}, {2, 3});
  expect_near(sum(t, {0}), {5, 7, 9});
  expect_near(sum(t, {1}, true), {9, 12});
  expect_near(mean(t), {3.5f});
  auto m = max(t, 1);
  expect_near(m.values, {5, 6});
  EXPECT_EQ(m.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  expect_near(matmul(t, t.transpose(0, 1)), {35, 32, 32, 56});
  expect_near(linear(t, from_vector(std::vector<float>{1, 0, 0, 0, 1, 1}, {2, 3}), from_vector(std::vector<float>{10, 20}, {2})),
              {11, 28, 14, 28});
}

TEST(KnownValues, CausalAttentionFirstQuerySeesOnlyFirstKey) {
  Generator g(5);
  Tensor q = randn({1, 3, 4}, g), k = randn({1, 3, 4}, g), v = randn({1, 3, 4}, g);
  Tensor y = scaled_dot_product_attention(q, k, v, true);
  expect_near(slice(y, 1, 0, 1), slice(v, 1, 0, 1).to_vector<float>());
}

TEST(KnownValues, LargeElementwiseUsesThreadsCorrectly) {
  Tensor a = full({300, 1000}, 2.0f), b = full({1000}, 3.0f);
  Tensor c = add(mul(a, b), 1.0f);
  std::vector<float> v = c.to_vector<float>();
  for (float x : v) ASSERT_EQ(x, 7.0f);
  EXPECT_EQ(sum(c).item<float>(), 7.0f * 300000);
}
