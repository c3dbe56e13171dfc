// Mixed precision (autograd/autocast.h): under Autocast(BFloat16) matmul and linear multiply bf16
// values and accumulate in fp32 (checked against a reference that rounds the inputs to bf16 and
// sums in double), their backward keeps the forward's precision, the scope is per thread and
// nests, and a run with train.precision = "bf16" trains. conv2d and attention under bf16 and
// fp16, and fp16's range, are checked against float32 computing on the rounded operands.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "tessera/autograd/autocast.h"
#include "tessera/core/half_codec.h"
#include "tessera/ops/ops.h"
#include "tessera/train/config.h"
#include "tessera/train/run.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

std::vector<float> rounded(const Tensor& t) {
  std::vector<float> v = contiguous(t).to_vector<float>();
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

// (n, k) @ (k, m) of the bf16-rounded inputs, summed in double.
std::vector<double> reference(const Tensor& a, const Tensor& b) {
  const int64_t n = a.shape()[0], k = a.shape()[1], m = b.shape()[1];
  const std::vector<float> x = rounded(a), y = rounded(b);
  std::vector<double> out(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < m; ++j) out[static_cast<size_t>(i * m + j)] += double(x[i * k + p]) * y[p * m + j];
  return out;
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tolerance) {
  const std::vector<float> g = got.to_vector<float>();
  ASSERT_EQ(g.size(), want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], want[i], tolerance * scale) << "element " << i;
}

TEST(Autocast, ScopesNestPerThread) {
  EXPECT_EQ(autocast_dtype(), DType::Float32);
  {
    Autocast bf16(DType::BFloat16);
    EXPECT_EQ(autocast_dtype(), DType::BFloat16);
    std::thread other([] { EXPECT_EQ(autocast_dtype(), DType::Float32); });
    other.join();
    {
      Autocast off(DType::Float32);
      EXPECT_EQ(autocast_dtype(), DType::Float32);
    }
    EXPECT_EQ(autocast_dtype(), DType::BFloat16);
  }
  EXPECT_EQ(autocast_dtype(), DType::Float32);
  EXPECT_THROW(Autocast(DType::Int64), ValueError);
}

TEST(Autocast, MatmulMultipliesBf16AndAccumulatesFp32) {
  Generator gen(1);
  // Strided operands too (a transposed view), and a size past one kernel block.
  Tensor a = randn({70, 300}, gen), bt = randn({50, 300}, gen);
  Tensor b = transpose(bt, 0, 1);
  Tensor fp32 = matmul(a, b);
  Tensor bf16;
  {
    Autocast mixed(DType::BFloat16);
    bf16 = matmul(a, b);
  }
  EXPECT_EQ(bf16.dtype(), DType::Float32);
  expect_close(bf16, reference(a, b), 1e-5);  // what bf16 products summed in fp32 give
  // ... and not what fp32 gives: the inputs really were rounded.
  const std::vector<float> x = bf16.to_vector<float>(), y = fp32.to_vector<float>();
  double largest = 0;
  for (size_t i = 0; i < x.size(); ++i) largest = std::max(largest, double(std::abs(x[i] - y[i])));
  EXPECT_GT(largest, 1e-4);
}

TEST(Autocast, LinearBackwardRunsInTheForwardsPrecision) {
  Generator gen(2);
  Tensor x = randn({8, 40}, gen).set_requires_grad(true), w = randn({6, 40}, gen).set_requires_grad(true);
  Tensor bias = randn({6}, gen).set_requires_grad(true);
  Tensor g = randn({8, 6}, gen);
  Tensor y;
  {
    Autocast mixed(DType::BFloat16);
    y = linear(x, w, bias);
  }
  // The forward adds the bias as oneDNN writes the product (gemm_bf16's bias), in every row.
  std::vector<double> want = reference(x, transpose(w, 0, 1));
  const std::vector<float> b = bias.to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) want[i] += b[i % 6];
  expect_close(y, want, 1e-5);
  y.backward(g);  // outside the scope: still bf16, as its forward
  expect_close(w.grad(), reference(transpose(g, 0, 1), x), 1e-5);  // gᵀ x
  expect_close(x.grad(), reference(g, w), 1e-5);                   // g w
  std::vector<double> sums(6, 0.0);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 6; ++j) sums[static_cast<size_t>(j)] += g.to_vector<float>()[static_cast<size_t>(i * 6 + j)];
  expect_close(bias.grad(), sums, 1e-6);  // the bias gradient is a sum, fp32
}

// The tensor's values rounded through `format`, as a new float32 leaf.
Tensor rounded_through(const Tensor& t, HalfFormat format) {
  std::vector<float> v = contiguous(t).to_vector<float>();
  round_through_half(format, v.data(), v.data(), static_cast<int64_t>(v.size()));
  return from_vector(v, t.shape());
}

double largest_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = contiguous(a).to_vector<float>(), y = contiguous(b).to_vector<float>();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, double(std::abs(x[i] - y[i])));
  return d;
}

double largest_magnitude(const Tensor& a) {
  double m = 0;
  for (float v : contiguous(a).to_vector<float>()) m = std::max(m, double(std::abs(v)));
  return m;
}

// conv2d under autocast, forward and both gradients, equals float32 conv2d on the rounded operands
// (x, w, and the output gradient g): each product of two rounded values is exact in float32, so
// only the order of the float32 sums may differ (1e-5 of the largest value).
void expect_conv_equals_float32_on_rounded_operands(DType precision, HalfFormat format) {
  Generator gen(3);
  Tensor x = randn({4, 6, 9, 9}, gen).set_requires_grad(true), w = randn({8, 6, 3, 3}, gen).set_requires_grad(true);
  Tensor bias = randn({8}, gen).set_requires_grad(true);
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  o.stride_h = 2;
  Tensor y;
  {
    Autocast mixed(precision);
    y = conv2d(x, w, bias, o);
  }
  Tensor g = randn(y.shape(), gen);
  y.backward(g);
  Tensor xr = rounded_through(x, format).set_requires_grad(true), wr = rounded_through(w, format).set_requires_grad(true);
  Tensor br = bias.detach().set_requires_grad(true);
  Tensor want = conv2d(xr, wr, br, o);
  want.backward(rounded_through(g, format));
  EXPECT_LT(largest_difference(y, want), 1e-5 * largest_magnitude(want));
  EXPECT_LT(largest_difference(x.grad(), xr.grad()), 1e-5 * largest_magnitude(xr.grad()));
  EXPECT_LT(largest_difference(w.grad(), wr.grad()), 1e-5 * largest_magnitude(wr.grad()));
  EXPECT_LT(largest_difference(bias.grad(), br.grad()), 1e-5 * largest_magnitude(br.grad()));
  // ... and it is not float32's result: the operands really were rounded.
  EXPECT_GT(largest_difference(y, conv2d(x.detach(), w.detach(), bias.detach(), o)), 1e-5 * largest_magnitude(want));
}

TEST(Autocast, Conv2dMultipliesBf16AndAccumulatesFp32) {
  expect_conv_equals_float32_on_rounded_operands(DType::BFloat16, HalfFormat::Bf16);
}

TEST(Autocast, Conv2dMultipliesFp16AndAccumulatesFp32) {
  expect_conv_equals_float32_on_rounded_operands(DType::Float16, HalfFormat::Fp16);
}

TEST(Autocast, Bf16GradientsAgreeWithFloat32WithinBf16Rounding) {
  // Against float32 itself: each operand rounds by at most 2^-9 relative (bf16's unit roundoff is
  // 2^-8 of the value, half of it as an error bound); a sum of K products of two rounded values
  // errs by at most about 2 · 2^-9 · Σ|a·b|, which for these random inputs stays under 1% of the
  // largest output.
  Generator gen(4);
  Tensor x = randn({16, 64}, gen).set_requires_grad(true), w = randn({32, 64}, gen).set_requires_grad(true);
  Tensor x32 = x.detach().set_requires_grad(true), w32 = w.detach().set_requires_grad(true);
  Tensor g = randn({16, 32}, gen);
  {
    Autocast mixed(DType::BFloat16);
    linear(x, w, Tensor()).backward(g);
  }
  linear(x32, w32, Tensor()).backward(g);
  EXPECT_LT(largest_difference(x.grad(), x32.grad()), 0.01 * largest_magnitude(x32.grad()));
  EXPECT_LT(largest_difference(w.grad(), w32.grad()), 0.01 * largest_magnitude(w32.grad()));
  EXPECT_GT(largest_difference(w.grad(), w32.grad()), 0.0);
}

TEST(Autocast, AttentionsProductsRunInTheScopesPrecision) {
  // scaled_dot_product_attention is built on matmul, so both its products follow the scope; the
  // softmax between them stays float32.
  Generator gen(5);
  Tensor q = randn({2, 7, 16}, gen), k = randn({2, 7, 16}, gen), v = randn({2, 7, 16}, gen);
  for (auto [precision, format] : {std::pair{DType::BFloat16, HalfFormat::Bf16}, std::pair{DType::Float16, HalfFormat::Fp16}}) {
    Tensor got;
    {
      Autocast mixed(precision);
      got = scaled_dot_product_attention(q, k, v, true);
    }
    const Tensor qr = rounded_through(q, format), kr = rounded_through(k, format), vr = rounded_through(v, format);
    Tensor scores = mul(matmul(qr, transpose(kr, -2, -1)), 0.25f);
    Tensor mask = zeros({7, 7});
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = i + 1; j < 7; ++j) mask.data<float>()[i * 7 + j] = 1.0f;
    scores = masked_fill(scores, mask, -std::numeric_limits<float>::infinity());
    Tensor want = matmul(rounded_through(softmax(scores, -1), format), vr);
    EXPECT_LT(largest_difference(got, want), 1e-5 * largest_magnitude(want)) << dtype_name(precision);
  }
}

TEST(Autocast, BatchedMatmulBackwardRunsOnRoundedOperandsAndSumsBroadcastItems) {
  // (2, 3, 5, 4) @ (4, 6): b is broadcast over the batch, so its gradient sums six items' products.
  Generator gen(6);
  Tensor a = randn({2, 3, 5, 4}, gen).set_requires_grad(true), b = randn({4, 6}, gen).set_requires_grad(true);
  Tensor y;
  {
    Autocast mixed(DType::BFloat16);
    y = matmul(a, b);
  }
  Tensor g = randn(y.shape(), gen);
  y.backward(g);
  Tensor ar = rounded_through(a, HalfFormat::Bf16).set_requires_grad(true);
  Tensor br = rounded_through(b, HalfFormat::Bf16).set_requires_grad(true);
  Tensor want = matmul(ar, br);
  want.backward(rounded_through(g, HalfFormat::Bf16));
  EXPECT_LT(largest_difference(y, want), 1e-5 * largest_magnitude(want));
  EXPECT_LT(largest_difference(a.grad(), ar.grad()), 1e-5 * largest_magnitude(ar.grad()));
  EXPECT_LT(largest_difference(b.grad(), br.grad()), 1e-5 * largest_magnitude(br.grad()));
}

TEST(Autocast, Fp16OverflowsPast65504AndFlushesBelowItsRange) {
  // What loss scaling exists for: an operand past fp16's largest value becomes inf, one below its
  // smallest subnormal (2^-24) becomes 0; float32 and bf16 keep both.
  Tensor big = from_vector(std::vector<float>{70000.0f}, {1, 1}), tiny = from_vector(std::vector<float>{1e-8f}, {1, 1});
  Tensor one = ones({1, 1});
  {
    Autocast fp16(DType::Float16);
    EXPECT_TRUE(std::isinf(matmul(big, one).item<float>()));
    EXPECT_EQ(matmul(tiny, one).item<float>(), 0.0f);
    EXPECT_EQ(matmul(from_vector(std::vector<float>{65504.0f}, {1, 1}), one).item<float>(), 65504.0f);
  }
  {
    Autocast bf16(DType::BFloat16);
    EXPECT_TRUE(std::isfinite(matmul(big, one).item<float>()));
    EXPECT_GT(matmul(tiny, one).item<float>(), 0.0f);
  }
}

TEST(Autocast, ATrainingRunInBf16OrFp16Learns) {
  const std::string dir = tessera::testing::fresh_dir("autocast", "train");
  auto config = [&](const std::string& precision) {
    return train::parse_config("[model]\nname = \"mlp\"\nhidden = [64]\n[data]\ndataset = \"synthetic\"\nsamples = 1024\n"
                               "test_samples = 256\nclasses = 4\n[optimizer]\nname = \"adam\"\nlr = 0.003\n"
                               "[train]\nepochs = 3\nbatch_size = 32\nthreads = 1\nlog_every = 1000\nprecision = \"" +
                                   precision + "\"\noutput_dir = \"" + dir + "/" + precision + "\"\n",
                               "test");
  };
  const train::RunOutcome fp32 = train::run(config("fp32"), {.stop_on_signals = false});
  const train::RunOutcome bf16 = train::run(config("bf16"), {.stop_on_signals = false});
  ASSERT_TRUE(fp32.fit.last_eval && bf16.fit.last_eval);
  EXPECT_GE(bf16.fit.last_eval->accuracy, fp32.fit.last_eval->accuracy - 0.05);
  EXPECT_NE(bf16.fit.last_eval->loss, fp32.fit.last_eval->loss);  // it did compute differently
  const train::RunOutcome fp16 = train::run(config("fp16"), {.stop_on_signals = false});
  ASSERT_TRUE(fp16.fit.last_eval);
  EXPECT_GE(fp16.fit.last_eval->accuracy, fp32.fit.last_eval->accuracy - 0.05);
  // Parameter servers cannot agree on skipping a step: fp16 is refused there, saying why.
  train::TrainConfig ps = config("fp16");
  ps.distributed.strategy = "ps";
  try {
    train::validate(ps);
    ADD_FAILURE() << "fp16 with parameter servers accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
