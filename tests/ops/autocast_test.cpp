// Mixed precision (autograd/autocast.h): under Autocast(BFloat16) matmul and linear multiply bf16
// values and accumulate in fp32 (checked against a reference that rounds the inputs to bf16 and
// sums in double), their backward keeps the forward's precision, the scope is per thread and
// nests, and a run with train.precision = "bf16" trains.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "tessera/autograd/autocast.h"
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
  y.backward(g);  // outside the scope: still bf16, as its forward
  expect_close(w.grad(), reference(transpose(g, 0, 1), x), 1e-5);  // gᵀ x
  expect_close(x.grad(), reference(g, w), 1e-5);                   // g w
  std::vector<double> sums(6, 0.0);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 6; ++j) sums[static_cast<size_t>(j)] += g.to_vector<float>()[static_cast<size_t>(i * 6 + j)];
  expect_close(bias.grad(), sums, 1e-6);  // the bias gradient is a sum, fp32
}

TEST(Autocast, ATrainingRunInBf16Learns) {
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
  train::TrainConfig fp16 = config("fp32");
  fp16.train.precision = "fp16";
  try {
    train::validate(fp16);
    ADD_FAILURE() << "fp16 accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("loss scaling"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
