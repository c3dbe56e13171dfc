// conv2d (cuDNN) and pooling on CUDA against the CPU's ops, forward and every gradient: the CNN's
// shapes, strides, padding, dilation, groups, with and without bias, bf16 autocast; max pooling
// (2x2/stride 2 and overlapping 3x3/stride 2 windows, a NaN, relu first) bit for bit, as its kernels
// follow the CPU's loops and add the gradients in the CPU's order; average pooling within rounding.
// Convolution tolerance: the devices sum C·KH·KW products in different orders: 1e-4 relative and
// 1e-5·√(C·KH·KW) absolute; bf16: both round operands the same way, 2e-2 covers the products'
// differing order over bf16-rounded values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tessera/autograd/autocast.h"
#include "tessera/ops/ops.h"
#include "testing/cuda_device.h"

namespace tessera {
namespace {

void expect_close(const Tensor& gpu, const Tensor& cpu, float rtol, float atol, const std::string& what) {
  ASSERT_EQ(gpu.device(), cuda_device(0)) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<float> g = gpu.to_vector<float>(), c = cpu.to_vector<float>();
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    EXPECT_NEAR(g[i], c[i], atol + rtol * std::fabs(c[i])) << what << " element " << i;
  }
}

void expect_bitwise(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<float> g = gpu.to_vector<float>(), c = cpu.to_vector<float>();
  EXPECT_EQ(std::memcmp(g.data(), c.data(), c.size() * sizeof(float)), 0) << what;
}

Tensor operand(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, gen);
}

struct ConvCase {
  std::string name;
  Shape x, w;
  Conv2dOptions opt;
  bool bias;
};

TEST(CudaConv, ForwardAndGradientsEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Conv2dOptions pad1;
  pad1.pad_h = pad1.pad_w = 1;
  Conv2dOptions strided = pad1;
  strided.stride_h = strided.stride_w = 2;
  Conv2dOptions dilated;
  dilated.dilation_h = dilated.dilation_w = 2;
  dilated.pad_h = 2;
  Conv2dOptions grouped = pad1;
  grouped.groups = 2;
  const std::vector<ConvCase> cases = {
      {"the CNN's first layer", {4, 1, 28, 28}, {32, 1, 3, 3}, pad1, true},
      {"the CNN's second layer", {4, 32, 14, 14}, {64, 32, 3, 3}, pad1, true},
      {"stride 2, no bias", {3, 5, 11, 9}, {7, 5, 3, 3}, strided, false},
      {"dilation 2", {2, 4, 12, 10}, {6, 4, 3, 3}, dilated, true},
      {"groups 2", {2, 6, 8, 8}, {4, 3, 3, 3}, grouped, true},
      {"1x1", {2, 16, 5, 5}, {8, 16, 1, 1}, Conv2dOptions{}, true},
  };
  for (const ConvCase& c : cases) {
    const int64_t reduced = c.w[1] * c.w[2] * c.w[3];
    const float atol = 1e-5f * std::sqrt(static_cast<float>(reduced)) * 4;
    Tensor x = operand(c.x, 1).set_requires_grad(true), w = operand(c.w, 2).set_requires_grad(true);
    Tensor b = c.bias ? operand({c.w[0]}, 3).set_requires_grad(true) : Tensor();
    Tensor xg = x.cuda().detach().set_requires_grad(true), wg = w.cuda().detach().set_requires_grad(true);
    Tensor bg = c.bias ? b.cuda().detach().set_requires_grad(true) : Tensor();
    Tensor out = conv2d(x, w, b, c.opt), out_g = conv2d(xg, wg, bg, c.opt);
    expect_close(out_g, out, 1e-4f, atol, c.name + " forward");
    Tensor weights = operand(out.shape(), 4);
    sum(mul(out, weights)).backward();
    sum(mul(out_g, weights.cuda())).backward();
    expect_close(xg.grad(), x.grad(), 1e-4f, atol * 4, c.name + " grad x");
    expect_close(wg.grad(), w.grad(), 1e-4f, atol * 40, c.name + " grad w");  // sums over N·OH·OW too
    if (c.bias) expect_close(bg.grad(), b.grad(), 1e-4f, 1e-3f, c.name + " grad bias");
  }
}

TEST(CudaConv, Bf16AutocastRoundsAsTheCpuDoes) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Autocast bf16(DType::BFloat16);
  Conv2dOptions pad1;
  pad1.pad_h = pad1.pad_w = 1;
  Tensor x = operand({4, 8, 14, 14}, 5), w = operand({16, 8, 3, 3}, 6), b = operand({16}, 7);
  expect_close(conv2d(x.cuda(), w.cuda(), b.cuda(), pad1), conv2d(x, w, b, pad1), 2e-2f, 2e-2f, "bf16 conv2d");
}

TEST(CudaPool, MaxPoolingIsTheCpusBitForBit) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Pool2dOptions k2s2;
  Pool2dOptions overlapping;
  overlapping.kernel_h = overlapping.kernel_w = 3;
  overlapping.pad_h = overlapping.pad_w = 1;
  for (const Pool2dOptions& o : {k2s2, overlapping}) {
    for (bool relu_first : {false, true}) {
      Tensor x = operand({3, 4, 9, 10}, 8);
      // Ties and (without relu) a NaN, which each loop orders its own way.
      std::vector<float> v = x.to_vector<float>();
      v[5] = v[6];
      if (!relu_first) v[40] = std::numeric_limits<float>::quiet_NaN();
      x = from_vector(v, x.shape());
      Tensor xc = x.detach().set_requires_grad(true), xg = x.cuda().detach().set_requires_grad(true);
      Tensor out = relu_first ? relu_max_pool2d(xc, o) : max_pool2d(xc, o);
      Tensor out_g = relu_first ? relu_max_pool2d(xg, o) : max_pool2d(xg, o);
      const std::string what = std::string(relu_first ? "relu_max_pool2d" : "max_pool2d") + " kernel " +
                               std::to_string(o.kernel_h);
      expect_bitwise(out_g, out, what);
      Tensor weights = operand(out.shape(), 9);
      sum(mul(out, weights)).backward();
      sum(mul(out_g, weights.cuda())).backward();
      expect_bitwise(xg.grad(), xc.grad(), what + " grad");
    }
  }
}

TEST(CudaPool, AveragePoolingEqualsTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Pool2dOptions k2s2;
  Pool2dOptions overlapping;
  overlapping.kernel_h = overlapping.kernel_w = 3;
  overlapping.stride_h = 1;
  overlapping.pad_h = overlapping.pad_w = 1;
  for (const Pool2dOptions& o : {k2s2, overlapping}) {
    Tensor x = operand({2, 3, 8, 7}, 10).set_requires_grad(true);
    Tensor xg = x.cuda().detach().set_requires_grad(true);
    Tensor out = avg_pool2d(x, o), out_g = avg_pool2d(xg, o);
    expect_close(out_g, out, 1e-6f, 1e-6f, "avg_pool2d forward");
    Tensor weights = operand(out.shape(), 11);
    sum(mul(out, weights)).backward();
    sum(mul(out_g, weights.cuda())).backward();
    expect_close(xg.grad(), x.grad(), 1e-6f, 1e-6f, "avg_pool2d grad");
  }
}

}  // namespace
}  // namespace tessera
