// A finite-difference gradient check for every differentiable op, on random shapes drawn per seed,
// with broadcasting, non-contiguous (transposed) inputs and size-1 dims; size-0 dims get their own
// test below (nothing to differentiate, but forward and backward must run and keep shapes).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "tessera/autograd/gradcheck.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/ops.h"

using namespace tessera;
using Inputs = std::vector<Tensor>;

namespace {

struct Case {
  std::string name;
  std::function<Inputs(Generator&)> make_inputs;
  std::function<Tensor(const Inputs&)> f;
  autograd::GradcheckOptions options = {};
};

int64_t dim_in(Generator& g, int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(g.next_u64() % (hi - lo + 1)); }
Tensor rn(const Shape& s, Generator& g) { return randn(s, g); }
// A leaf whose strides are transposed (non-contiguous), holding a fresh random (rows, cols) matrix.
Tensor transposed_leaf(int64_t rows, int64_t cols, Generator& g) { return randn({cols, rows}, g).transpose(0, 1).detach(); }
// Values at least `gap` away from 0 (keeps relu/abs-like kinks out of the finite differences).
Tensor away_from_zero(const Shape& s, Generator& g, float gap = 0.1f) {
  Tensor t = randn(s, g);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] >= 0 ? p[i] + gap : p[i] - gap;
  return t;
}
// Distinct values spaced further apart than 2*eps so max/argmax cannot flip under perturbation.
Tensor distinct(const Shape& s, Generator& g) {
  Tensor t = Tensor::empty(s);
  int64_t n = t.numel();
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[g.next_u64() % (i + 1)]);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = 0.1f * static_cast<float>(perm[i]) - 0.05f * n;
  return t;
}
Tensor positive(const Shape& s, Generator& g) {
  Tensor t = rand(s, g);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.5f + p[i];
  return t;
}

std::vector<Case> all_cases() {
  std::vector<Case> c;
  auto shape3 = [](Generator& g) { return Shape{dim_in(g, 1, 3), dim_in(g, 1, 4), dim_in(g, 2, 4)}; };
  // Binary broadcasting: (a, 1, c) with (b, 1).
  auto bcast = [](Generator& g) {
    int64_t a = dim_in(g, 1, 3), b = dim_in(g, 2, 3), cc = dim_in(g, 1, 4);
    return Inputs{rn({a, 1, cc}, g), rn({b, 1}, g)};
  };
  c.push_back({"add_broadcast", bcast, [](const Inputs& x) { return add(x[0], x[1]); }});
  c.push_back({"sub_broadcast", bcast, [](const Inputs& x) { return sub(x[0], x[1]); }});
  c.push_back({"mul_broadcast", bcast, [](const Inputs& x) { return mul(x[0], x[1]); }});
  c.push_back({"div_broadcast", [](Generator& g) { return Inputs{rn({2, 3}, g), positive({3}, g)}; },
               [](const Inputs& x) { return div(x[0], x[1]); }});
  c.push_back({"mul_noncontiguous", [](Generator& g) {
                 int64_t r = dim_in(g, 2, 4), k = dim_in(g, 1, 4);
                 return Inputs{transposed_leaf(r, k, g), rn({r, k}, g)};
               },
               [](const Inputs& x) { return mul(x[0], x[1]); }});
  c.push_back({"add_scalar_mul_scalar", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; },
               [](const Inputs& x) { return mul(add(x[0], 1.5f), -2.0f); }});
  c.push_back({"neg", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; }, [](const Inputs& x) { return neg(x[0]); }});
  c.push_back({"exp", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; }, [](const Inputs& x) { return exp(x[0]); }});
  c.push_back({"log", [=](Generator& g) { return Inputs{positive(shape3(g), g)}; }, [](const Inputs& x) { return log(x[0]); }});
  c.push_back({"sqrt", [=](Generator& g) { return Inputs{positive(shape3(g), g)}; }, [](const Inputs& x) { return sqrt(x[0]); }});
  c.push_back({"pow_scalar", [=](Generator& g) { return Inputs{positive(shape3(g), g)}; },
               [](const Inputs& x) { return pow(x[0], 2.5f); }});
  c.push_back({"pow_tensor", [](Generator& g) { return Inputs{positive({2, 3}, g), rn({3}, g)}; },
               [](const Inputs& x) { return pow(x[0], x[1]); }});
  c.push_back({"tanh", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; }, [](const Inputs& x) { return tanh(x[0]); }});
  c.push_back({"sigmoid", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; }, [](const Inputs& x) { return sigmoid(x[0]); }});
  c.push_back({"relu", [=](Generator& g) { return Inputs{away_from_zero(shape3(g), g)}; }, [](const Inputs& x) { return relu(x[0]); }});
  c.push_back({"relu_noncontiguous", [](Generator& g) {
                 Tensor t = away_from_zero({4, 3}, g).transpose(0, 1).detach();
                 return Inputs{t};
               },
               [](const Inputs& x) { return relu(x[0]); }});
  c.push_back({"gelu", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; }, [](const Inputs& x) { return gelu(x[0]); }});
  c.push_back({"sum_dims_keepdim", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; },
               [](const Inputs& x) { return sum(x[0], {0, 2}, true); }});
  c.push_back({"sum_middle", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; }, [](const Inputs& x) { return sum(x[0], {1}); }});
  c.push_back({"sum_all", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; }, [](const Inputs& x) { return sum(x[0]); }});
  c.push_back({"mean_last", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; },
               [](const Inputs& x) { return mean(x[0], {-1}, true); }});
  c.push_back({"max_dim", [=](Generator& g) { return Inputs{distinct(shape3(g), g)}; },
               [](const Inputs& x) { return max(x[0], 1, false).values; }});
  c.push_back({"max_dim_keepdim", [=](Generator& g) { return Inputs{distinct(shape3(g), g)}; },
               [](const Inputs& x) { return max(x[0], -1, true).values; }});
  c.push_back({"matmul_2d", [](Generator& g) {
                 int64_t n = dim_in(g, 1, 4), k = dim_in(g, 1, 5), m = dim_in(g, 1, 4);
                 return Inputs{rn({n, k}, g), rn({k, m}, g)};
               },
               [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_transposed_operands", [](Generator& g) { return Inputs{transposed_leaf(3, 4, g), transposed_leaf(4, 2, g)}; },
               [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_batched_broadcast", [](Generator& g) { return Inputs{rn({2, 1, 3, 4}, g), rn({3, 4, 2}, g)}; },
               [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_vector", [](Generator& g) { return Inputs{rn({4}, g), rn({4, 3}, g)}; },
               [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"linear_bias", [](Generator& g) {
                 int64_t n = dim_in(g, 1, 4), in = dim_in(g, 1, 5), out = dim_in(g, 1, 4);
                 return Inputs{rn({n, in}, g), rn({out, in}, g), rn({out}, g)};
               },
               [](const Inputs& x) { return linear(x[0], x[1], x[2]); }});
  c.push_back({"linear_3d_input", [](Generator& g) { return Inputs{rn({2, 3, 4}, g), rn({5, 4}, g), rn({5}, g)}; },
               [](const Inputs& x) { return linear(x[0], x[1], x[2]); }});
  c.push_back({"conv2d_pad_stride_dilation", [](Generator& g) { return Inputs{rn({2, 2, 6, 5}, g), rn({3, 2, 3, 2}, g), rn({3}, g)}; },
               [](const Inputs& x) {
                 Conv2dOptions o;
                 o.stride_h = 2;
                 o.pad_h = 1;
                 o.pad_w = 2;
                 o.dilation_w = 2;
                 return conv2d(x[0], x[1], x[2], o);
               }});
  c.push_back({"conv2d_groups", [](Generator& g) { return Inputs{rn({1, 4, 5, 5}, g), rn({6, 2, 3, 3}, g), rn({6}, g)}; },
               [](const Inputs& x) {
                 Conv2dOptions o;
                 o.groups = 2;
                 o.pad_h = o.pad_w = 1;
                 return conv2d(x[0], x[1], x[2], o);
               }});
  c.push_back({"conv2d_noncontiguous_input", [](Generator& g) { return Inputs{rn({1, 2, 5, 4}, g).transpose(2, 3).detach(), rn({2, 2, 2, 2}, g)}; },
               [](const Inputs& x) { return conv2d(x[0], x[1]); }});
  c.push_back({"max_pool2d", [](Generator& g) { return Inputs{distinct({2, 2, 5, 6}, g)}; },
               [](const Inputs& x) { return max_pool2d(x[0]); }});
  c.push_back({"max_pool2d_even_tiles", [](Generator& g) { return Inputs{distinct({2, 2, 4, 6}, g)}; },
               [](const Inputs& x) { return max_pool2d(x[0]); }});
  // relu_max_pool2d on distinct values shifted off 0 (odd multiples of 0.05), so no ReLU kink is hit.
  const auto distinct_off_zero = [](const Shape& s, Generator& g) {
    Tensor t = distinct(s, g);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] += 0.05f;
    return t;
  };
  c.push_back({"relu_max_pool2d", [=](Generator& g) { return Inputs{distinct_off_zero({2, 2, 5, 6}, g)}; },
               [](const Inputs& x) { return relu_max_pool2d(x[0]); }});
  c.push_back({"relu_max_pool2d_even_tiles", [=](Generator& g) { return Inputs{distinct_off_zero({2, 2, 4, 6}, g)}; },
               [](const Inputs& x) { return relu_max_pool2d(x[0]); }});
  c.push_back({"relu_max_pool2d_padded_stride1", [=](Generator& g) { return Inputs{distinct_off_zero({1, 2, 4, 4}, g)}; },
               [](const Inputs& x) { return relu_max_pool2d(x[0], Pool2dOptions{3, 3, 1, 1, 1, 1}); }});
  c.push_back({"max_pool2d_padded_stride1", [](Generator& g) { return Inputs{distinct({1, 2, 4, 4}, g)}; },
               [](const Inputs& x) { return max_pool2d(x[0], Pool2dOptions{3, 3, 1, 1, 1, 1}); }});
  c.push_back({"avg_pool2d", [](Generator& g) { return Inputs{rn({2, 2, 5, 6}, g)}; },
               [](const Inputs& x) { return avg_pool2d(x[0], Pool2dOptions{3, 2, 2, 1, 1, 0}); }});
  c.push_back({"softmax_last", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; },
               [](const Inputs& x) { return softmax(x[0], -1); }});
  c.push_back({"softmax_dim0", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; },
               [](const Inputs& x) { return softmax(x[0], 0); }});
  c.push_back({"log_softmax", [=](Generator& g) { return Inputs{rn(shape3(g), g)}; },
               [](const Inputs& x) { return log_softmax(x[0], 1); }});
  c.push_back({"cross_entropy_smoothing_ignore", [](Generator& g) { return Inputs{rn({5, 4}, g)}; },
               [](const Inputs& x) {
                 Tensor t = from_vector(std::vector<int64_t>{0, 3, -100, 2, 1}, {5});
                 return cross_entropy(x[0], t, CrossEntropyOptions{-100, 0.1f});
               }});
  c.push_back({"mse_loss", [](Generator& g) { return Inputs{rn({3, 2}, g), rn({3, 2}, g)}; },
               [](const Inputs& x) { return mse_loss(x[0], x[1]); }});
  c.push_back({"embedding_repeated_rows", [](Generator& g) { return Inputs{rn({5, 3}, g)}; },
               [](const Inputs& x) { return embedding(x[0], from_vector(std::vector<int64_t>{1, 4, 1, 0, 1, 2}, {2, 3})); }});
  c.push_back({"layer_norm", [](Generator& g) { return Inputs{rn({3, 2, 4}, g), rn({2, 4}, g), rn({2, 4}, g)}; },
               [](const Inputs& x) { return layer_norm(x[0], {2, 4}, x[1], x[2]); }});
  c.push_back({"batch_norm_train", [](Generator& g) { return Inputs{rn({3, 2, 2, 2}, g), rn({2}, g), rn({2}, g)}; },
               [](const Inputs& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true); }});
  c.push_back({"batch_norm_eval", [](Generator& g) { return Inputs{rn({3, 2}, g), rn({2}, g), rn({2}, g)}; },
               [](const Inputs& x) {
                 return batch_norm(x[0], from_vector(std::vector<float>{0.1f, -0.2f}, {2}),
                                   from_vector(std::vector<float>{1.5f, 0.7f}, {2}), x[1], x[2], false);
               }});
  c.push_back({"dropout_seeded", [](Generator& g) { return Inputs{rn({4, 5}, g)}; },
               [](const Inputs& x) {
                 Generator local(7);  // the same mask on every evaluation
                 return dropout(x[0], 0.3f, true, local);
               }});
  c.push_back({"cat_dim1", [](Generator& g) { return Inputs{rn({2, 1, 3}, g), rn({2, 3, 3}, g)}; },
               [](const Inputs& x) { return cat({x[0], x[1]}, 1); }});
  c.push_back({"stack", [](Generator& g) { return Inputs{rn({2, 3}, g), rn({2, 3}, g)}; },
               [](const Inputs& x) { return stack({x[0], x[1]}, 1); }});
  c.push_back({"split_recombined", [](Generator& g) { return Inputs{rn({5, 2}, g)}; },
               [](const Inputs& x) {
                 auto parts = split(x[0], 2, 0);
                 return add(mul(parts[0], 2.0f), parts[1]);
               }});
  c.push_back({"index_select", [](Generator& g) { return Inputs{rn({3, 4}, g)}; },
               [](const Inputs& x) { return index_select(x[0], 1, from_vector(std::vector<int64_t>{3, 0, 3}, {3})); }});
  c.push_back({"where", [](Generator& g) { return Inputs{rn({2, 3}, g), rn({3}, g)}; },
               [](const Inputs& x) { return where(from_vector(std::vector<float>{1, 0, 1, 0, 0, 1}, {2, 3}), x[0], x[1]); }});
  c.push_back({"masked_fill", [](Generator& g) { return Inputs{rn({2, 3}, g)}; },
               [](const Inputs& x) { return masked_fill(x[0], from_vector(std::vector<float>{0, 1, 0}, {3}), 5.0f); }});
  c.push_back({"views_chain", [](Generator& g) { return Inputs{rn({2, 3, 4}, g)}; },
               [](const Inputs& x) {
                 Tensor t = permute(x[0], {2, 0, 1});              // (4, 2, 3)
                 t = slice(t, 0, 1, 4, 2);                          // (2, 2, 3)
                 t = reshape(t, {4, 3});                            // copy (non-contiguous)
                 t = unsqueeze(t, 1).expand({4, 2, 3});             // broadcast
                 return flatten(transpose(t, 0, 2), 1);
               }});
  c.push_back({"sdpa_causal", [](Generator& g) { return Inputs{rn({1, 2, 3, 4}, g), rn({1, 2, 3, 4}, g), rn({1, 2, 3, 4}, g)}; },
               [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }});
  // A query block at the end of a longer key cache, and attention that sees every key.
  c.push_back({"sdpa_causal_cache", [](Generator& g) { return Inputs{rn({1, 2, 2, 4}, g), rn({1, 2, 5, 4}, g), rn({1, 2, 5, 4}, g)}; },
               [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }});
  c.push_back({"sdpa_full", [](Generator& g) { return Inputs{rn({2, 3, 4}, g), rn({2, 5, 4}, g), rn({2, 5, 4}, g)}; },
               [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); }});
  return c;
}

class OpGradcheck : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(OpGradcheck, MatchesFiniteDifferences) {
  static const std::vector<Case> cases = all_cases();
  auto [index, seed] = GetParam();

  const Case& c = cases[index];
  Generator g(1000 + seed * 7919 + index);
  Inputs inputs = c.make_inputs(g);
  auto r = autograd::gradcheck(c.f, inputs, c.options);
  EXPECT_TRUE(r.ok) << c.name << " (seed " << seed << "): " << r.message;
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpGradcheck, ::testing::Combine(::testing::Range(0, static_cast<int>(all_cases().size())), ::testing::Range(0, 3)),
                         [](const auto& info) {
                           static const std::vector<Case> cases = all_cases();
                           int i = std::get<0>(info.param);
                           std::string n = i < static_cast<int>(cases.size()) ? cases[i].name : "unused_" + std::to_string(i);
                           return n + "_seed" + std::to_string(std::get<1>(info.param));
                         });


// Size-0 dims: forward and backward run and produce correctly shaped (empty) gradients.
TEST(ZeroSize, ForwardAndBackwardKeepShapes) {
  Tensor a = zeros({0, 3}).set_requires_grad(true);
  Tensor b = ones({3}).set_requires_grad(true);
  Tensor w = ones({4, 3}).set_requires_grad(true);
  Tensor y = sum(relu(linear(mul(a, b), w)));
  EXPECT_EQ(y.item<float>(), 0.0f);
  y.backward();
  EXPECT_EQ(a.grad().shape(), (Shape{0, 3}));
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(12, 0.0f));
  Tensor s = softmax(zeros({0, 5}).set_requires_grad(true), -1);
  EXPECT_EQ(s.shape(), (Shape{0, 5}));
  EXPECT_EQ(cat({zeros({0, 2}), ones({1, 2})}, 0).shape(), (Shape{1, 2}));
}

}  // namespace

namespace {

// The im2col + sgemm convolution (the fallback to oneDNN) gets the same checks.
TEST(Im2colConvolution, MatchesFiniteDifferencesAndOneDnn) {
  const std::vector<Case> cases = all_cases();
  for (const Case& c : cases) {
    if (c.name.rfind("conv2d", 0) != 0) continue;
    Generator g(77);
    Inputs inputs = c.make_inputs(g);
    set_conv_algorithm(ConvAlgorithm::Im2col);
    auto r = autograd::gradcheck(c.f, inputs, c.options);
    Tensor im2col_out;
    {
      NoGradGuard no_grad;
      im2col_out = c.f(inputs);
    }
    set_conv_algorithm(ConvAlgorithm::OneDnn);
    EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
    NoGradGuard no_grad;
    std::vector<float> a = im2col_out.to_vector<float>(), b = c.f(inputs).to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4f) << c.name << " element " << i;
  }
}

}  // namespace
