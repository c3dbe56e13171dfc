// relu_max_pool2d (ReLU and max-pooling in one pass) against relu then max_pool2d: the same bits in
// value and gradient, for tiling and overlapping windows, with NaN, ties, -0 and all-negative windows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "tessera/autograd/node.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/models.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

using namespace tessera;
using tessera::testing::bitwise_equal;

namespace {

// Random values, with a few exact ties, zeros of both signs, NaNs and windows of negatives only.
Tensor awkward_input(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  Tensor x = randn(shape, g);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    switch (g.next_u64() % 16) {
      case 0: p[i] = 0.0f; break;
      case 1: p[i] = -0.0f; break;
      case 2: p[i] = 0.5f; break;  // ties between neighbours
      case 3: p[i] = -std::fabs(p[i]); break;
      default: break;
    }
  }
  for (int64_t i = 0; i + 4 < x.numel(); i += 37) p[i] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < std::min<int64_t>(8, x.numel()); ++i) p[i] = -1.0f - static_cast<float>(i);  // a negative window
  return x;
}

// The names of the backward nodes the graph of t holds.
std::set<std::string> backward_nodes(const Tensor& t) {
  std::set<std::string> names;
  std::vector<std::shared_ptr<autograd::Node>> todo{t.grad_fn()};
  std::set<const autograd::Node*> seen;
  while (!todo.empty()) {
    auto node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node.get()).second) continue;
    names.insert(node->name());
    for (const auto& edge : node->next_edges) todo.push_back(edge.node);
  }
  return names;
}

// Five values only, so that most windows hold ties, in every arrangement.
Tensor tied_input(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  Tensor x = Tensor::empty(shape);
  const float values[] = {-1.0f, 0.0f, 0.5f, 1.0f, 2.0f};
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = values[g.next_u64() % 5];
  return x;
}

}  // namespace

TEST(ReluMaxPool2d, EqualsReluThenMaxPoolBitForBit) {
  struct Case {
    Shape shape;
    Pool2dOptions options;
    bool tied;
  };
  const Case cases[] = {
      {{3, 4, 8, 10}, {}, false},                 // 2x2 windows tiling the plane (the vectorised loop)
      {{4, 3, 12, 14}, {}, true},                 // the same, nearly every window holding a tie
      {{2, 3, 7, 9}, {}, false},                  // 2x2 windows, odd sizes: the last row and column unused
      {{2, 3, 7, 9}, {}, true},
      {{2, 3, 6, 6}, {3, 3, 1, 1, 1, 1}, false},  // overlapping, padded windows
      {{2, 3, 6, 6}, {3, 3, 1, 1, 1, 1}, true},
      {{2, 2, 9, 7}, {3, 2, 2, 1, 1, 0}, false},  // rectangular kernel and stride
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.shape) + (c.tied ? " tied" : ""));
    Tensor x1 = c.tied ? tied_input(c.shape, seed++) : awkward_input(c.shape, seed++);
    Tensor x2 = x1.clone();
    x1.set_requires_grad(true);
    x2.set_requires_grad(true);
    Tensor fused = relu_max_pool2d(x1, c.options);
    Tensor separate = max_pool2d(relu(x2), c.options);
    ASSERT_TRUE(bitwise_equal(fused, separate));
    Generator g(seed++);
    Tensor upstream = randn(fused.shape(), g);
    sum(mul(fused, upstream)).backward();
    sum(mul(separate, upstream)).backward();
    EXPECT_TRUE(bitwise_equal(x1.grad(), x2.grad()));
  }
}

// 2x2 windows that tile the plane take the vectorised forward and backward; the same windows in a
// plane one row and one column larger (which they no longer tile) take the window-by-window loops.
// Both must give the same bits, in the value and in the gradient, with ties, NaN and -0 about.
TEST(Pool2d, TilingWindowsGiveTheBitsOfTheWindowByWindowLoops) {
  for (bool relu_first : {false, true}) {
    for (bool tied : {false, true}) {
      SCOPED_TRACE(std::string(relu_first ? "relu_max_pool2d" : "max_pool2d") + (tied ? " tied" : ""));
      const Shape shape{3, 4, 8, 10};
      Tensor x = tied ? tied_input(shape, 11) : awkward_input(shape, 11);
      Generator g(12);
      Tensor big = randn({3, 4, 9, 11}, g);
      for (int64_t plane = 0; plane < 12; ++plane)
        for (int64_t h = 0; h < 8; ++h)
          for (int64_t w = 0; w < 10; ++w)
            big.data<float>()[(plane * 9 + h) * 11 + w] = x.data<float>()[(plane * 8 + h) * 10 + w];
      x.set_requires_grad(true);
      big.set_requires_grad(true);
      auto pool = [relu_first](const Tensor& t) { return relu_first ? relu_max_pool2d(t, {}) : max_pool2d(t, {}); };
      Tensor tiled = pool(x), by_window = pool(big);
      ASSERT_TRUE(bitwise_equal(tiled, by_window));
      Tensor upstream = randn(tiled.shape(), g);
      sum(mul(tiled, upstream)).backward();
      sum(mul(by_window, upstream)).backward();
      Tensor inner = contiguous(slice(slice(big.grad(), 2, 0, 8), 3, 0, 10));
      EXPECT_TRUE(bitwise_equal(x.grad(), inner));
    }
  }
}

TEST(Pool2d, AWindowLargerThanThePaddedInputIsRefused) {
  // A 2x2 window over a 1x1 plane once gave a 1x1 output (the size formula's division truncated
  // toward zero) and read past the plane.
  for (const Shape& shape : {Shape{1, 1, 1, 1}, Shape{2, 3, 1, 5}, Shape{2, 3, 5, 1}}) {
    EXPECT_THROW(max_pool2d(zeros(shape)), ValueError) << shape_str(shape);
    EXPECT_THROW(relu_max_pool2d(zeros(shape)), ValueError) << shape_str(shape);
    EXPECT_THROW(avg_pool2d(zeros(shape)), ValueError) << shape_str(shape);
  }
  EXPECT_THROW(relu_max_pool2d(zeros({2, 3, 4})), ValueError);  // not (N, C, H, W)
  EXPECT_EQ(max_pool2d(zeros({1, 1, 2, 3})).shape(), (Shape{1, 1, 1, 1}));  // the window just fits
  // conv2d shares the size formula: a 3x3 kernel at stride 2 does not fit a 2x2 input.
  Conv2dOptions stride2;
  stride2.stride_h = stride2.stride_w = 2;
  EXPECT_THROW(conv2d(zeros({1, 1, 2, 2}), zeros({1, 1, 3, 3}), Tensor(), stride2), ValueError);
  EXPECT_EQ(conv2d(zeros({1, 1, 3, 3}), zeros({1, 1, 3, 3}), Tensor(), stride2).shape(), (Shape{1, 1, 1, 1}));
}

TEST(ReluMaxPool2d, SequentialRunsAReluAndMaxPoolAsOneOpWithTheSameResult) {
  // The CNN (ReLU then MaxPool2d twice) through Sequential::forward, which fuses the pairs, against
  // its layers called one by one.
  auto model = nn::make_cnn(10);
  Generator g(7);
  Tensor x = randn({4, 1, 28, 28}, g);
  Tensor fused_out = model->forward(x);
  // The fused op really ran: the graph of the Sequential's output holds its backward node, not ReLU's.
  const std::set<std::string> nodes = backward_nodes(fused_out);
  EXPECT_EQ(nodes.count("ReluMaxPool2dBackward"), 1u);
  EXPECT_EQ(nodes.count("MaxPool2dBackward"), 0u);
  sum(mul(fused_out, fused_out)).backward();
  std::vector<Tensor> fused_grads;
  for (auto& [name, p] : model->named_parameters()) fused_grads.push_back(p.grad().clone());
  model->zero_grad();
  Tensor h = x;
  for (const auto& [name, layer] : model->children()) h = layer->forward(h);
  ASSERT_TRUE(bitwise_equal(fused_out, h));
  sum(mul(h, h)).backward();
  size_t i = 0;
  for (auto& [name, p] : model->named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(bitwise_equal(fused_grads.at(i++), p.grad()));
  }
}
