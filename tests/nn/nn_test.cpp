#include <gtest/gtest.h>

#include <cmath>

#include "tessera/nn/layers.h"
#include "tessera/nn/transformer.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

using namespace tessera;
using tessera::testing::expect_error;
using tessera::testing::expect_near;

namespace {
std::shared_ptr<nn::Sequential> make_cnn() {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dConfig{1, 1}), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 14 * 14, 10)});
}
}  // namespace

TEST(Module, NamedParametersFollowPyTorchNaming) {
  auto m = make_cnn();
  std::vector<std::string> names;
  for (auto& [n, t] : m->state_dict()) names.push_back(n);
  std::vector<std::string> expected{"0.weight", "0.bias", "1.weight", "1.bias", "5.weight", "5.bias",
                                    "1.running_mean", "1.running_var", "1.num_batches_tracked"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(m->parameters().size(), 6u);
  EXPECT_EQ(m->num_parameters(), 4 * 9 + 4 + 4 + 4 + 784 * 10 + 10);
}

TEST(Module, ForwardShapesAndTrainEval) {
  auto m = make_cnn();
  Tensor y = (*m)(randn({2, 1, 28, 28}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  m->eval();
  EXPECT_FALSE((*m)[1]->is_training());
  Tensor z = (*m)(randn({1, 1, 28, 28}));  // eval BatchNorm accepts a batch of one
  EXPECT_EQ(z.shape(), (Shape{1, 10}));
}

TEST(Module, StateDictRoundTripAndStrictErrors) {
  manual_seed(1);
  auto a = make_cnn();
  manual_seed(2);
  auto b = make_cnn();
  b->load_state_dict(a->state_dict());
  auto sa = a->state_dict(), sb = b->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sa[i].second.str(), sb[i].second.str()) << sa[i].first;
  // Parameter handles stay valid after loading: b's Linear weight is the loaded one.
  auto lin = std::dynamic_pointer_cast<nn::Linear>((*b)[5]);
  EXPECT_EQ(lin->weight.to_vector<float>(), sa[4].second.to_vector<float>());

  nn::StateDict missing(sa.begin() + 1, sa.end());
  expect_error<ValueError>([&] { b->load_state_dict(missing); }, {"Missing keys", "0.weight"});
  nn::StateDict extra = sa;
  extra.emplace_back("9.weight", zeros({1}));
  expect_error<ValueError>([&] { b->load_state_dict(extra); }, {"Unexpected keys", "9.weight"});
  b->load_state_dict(extra, false);  // non-strict ignores it
  nn::StateDict wrong = sa;
  wrong[0].second = zeros({4, 1, 2, 2});
  expect_error<ValueError>([&] { b->load_state_dict(wrong, false); }, {"shape mismatch", "0.weight", "[4, 1, 2, 2]", "[4, 1, 3, 3]"});
}

TEST(Module, InitialisationMatchesPyTorchBounds) {
  manual_seed(3);
  nn::Linear l(400, 50);
  float bound = 1.0f / std::sqrt(400.0f);
  float mx = 0, mn = 0;
  for (float v : l.weight.to_vector<float>()) {
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  EXPECT_LE(mx, bound);
  EXPECT_GE(mn, -bound);
  EXPECT_GT(mx, 0.9f * bound);  // actually spans the range
  nn::Conv2d c(8, 4, 3);
  float cb = 1.0f / std::sqrt(8.0f * 9.0f);
  for (float v : c.bias.to_vector<float>()) EXPECT_LE(std::abs(v), cb);
  nn::LayerNorm ln(Shape{6});
  expect_near(ln.weight, std::vector<float>(6, 1.0f));
}

TEST(Module, ZeroGradAndDropoutModes) {
  nn::Linear l(3, 2);
  sum(l(ones({1, 3}))).backward();
  EXPECT_TRUE(l.weight.grad().defined());
  l.zero_grad(false);
  expect_near(l.weight.grad(), std::vector<float>(6, 0.0f));
  l.zero_grad();
  EXPECT_FALSE(l.weight.grad().defined());
  nn::Dropout d(0.5f);
  Tensor x = ones({1000});
  Tensor y = d(x);
  int zeros_count = 0;
  for (float v : y.to_vector<float>()) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f);
    zeros_count += v == 0.0f;
  }
  EXPECT_GT(zeros_count, 400);
  EXPECT_LT(zeros_count, 600);
  d.eval();
  expect_near(d(x), std::vector<float>(1000, 1.0f));
}

TEST(Module, ReplaceChildKeepsPositionAndNames) {
  nn::Sequential seq{std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(3, 1)};
  auto first = seq[0];
  auto old = seq.replace_child("0", std::make_shared<nn::Linear>(2, 3, false));
  EXPECT_EQ(old, first);
  auto names = seq.named_parameters();
  ASSERT_EQ(names.size(), 3u);  // 0.weight, then the last layer's weight and bias, in order
  EXPECT_EQ(names[0].first, "0.weight");
  EXPECT_EQ(names[1].first, "2.weight");
  expect_error<ValueError>([&] { seq.replace_child("5", std::make_shared<nn::ReLU>()); },
                           {"[replace_child]", "no child '5'", "children: 0, 1, 2"});
  expect_error<ValueError>([&] { seq.replace_child("1", nullptr); }, {"[replace_child]", "null"});
}

TEST(Transformer, BlockIsCausalAndDifferentiable) {
  manual_seed(4);
  nn::TransformerBlock block(8, 2);
  Tensor x = randn({2, 5, 8});
  Tensor y = block(x);
  EXPECT_EQ(y.shape(), x.shape());
  // Changing the last position must not change earlier outputs.
  Tensor x2 = x.clone();
  x2.data<float>()[4 * 8] += 1.0f;  // batch 0, position 4
  Tensor y2 = block(x2);
  expect_near(slice(slice(y2, 0, 0, 1), 1, 0, 4), slice(slice(y, 0, 0, 1), 1, 0, 4).to_vector<float>(), 1e-5f);
  sum(y).backward();
  for (auto& [n, p] : block.named_parameters()) EXPECT_TRUE(p.grad().defined()) << n;
  std::vector<std::string> names;
  for (auto& [n, p] : block.named_parameters()) names.push_back(n);
  EXPECT_EQ(names.front(), "ln_1.weight");
  EXPECT_EQ(names[2], "attn.qkv.weight");
  EXPECT_EQ(names.back(), "mlp.2.bias");
}
