// The CUDA kernel table against the CPU's (ops/kernels.h): every elementwise op code, forward and
// backward formulas alike, on contiguous, transposed and broadcast operands; copies between dtypes
// and layouts; fills; and the fused optimizer updates. Tolerances: the formulas are the same
// (ops/elementwise_formulas.h) but CUDA's expf/erff/powf and the CPU's vectorised exp/erf differ by a
// few ulps, so 1e-5 relative (GELU: the CPU's erf approximation, within 6e-7 absolute, sets 2e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tessera/ops/kernels.h"
#include "tessera/ops/ops.h"
#include "testing/cuda_device.h"

namespace tessera {
namespace {

void expect_close(const Tensor& gpu, const Tensor& cpu, float rtol, float atol, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<float> g = gpu.cpu().contiguous().to_vector<float>(), c = cpu.contiguous().to_vector<float>();
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    EXPECT_NEAR(g[i], c[i], atol + rtol * std::fabs(c[i])) << what << " element " << i;
  }
}

// Positive operands where a formula needs them (log, sqrt, pow's base).
Tensor operand(const Shape& shape, uint64_t seed, bool positive) {
  Generator gen(seed);
  Tensor t = randn(shape, gen);
  return positive ? add(mul(t, t), 0.5f) : t;
}

TEST(CudaKernels, EveryUnaryCodeEqualsTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  for (int code = 0; code <= static_cast<int>(UnaryOp::kNonzero); ++code) {
    const auto op = static_cast<UnaryOp>(code);
    const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kPowScalar;
    for (const Shape& shape : {Shape{}, Shape{1}, Shape{7, 33}, Shape{3, 4, 5, 6}}) {
      Tensor a = operand(shape, 1 + code, positive);
      const float scalar = op == UnaryOp::kPowScalar ? 1.5f : 0.25f;
      Tensor cpu = kernels_for(a).unary(op, a, scalar);
      Tensor gpu = kernels_for(cuda_device(0)).unary(op, a.cuda(), scalar);
      expect_close(gpu, cpu, 1e-5f, op == UnaryOp::kGelu ? 2e-6f : 1e-7f, std::string(op_name(op)) + " " + shape_str(shape));
    }
    // A transposed (strided) operand.
    Tensor t = operand({5, 9}, 100 + code, positive);
    Tensor strided_gpu = transpose(t.cuda(), 0, 1);
    Tensor cpu = kernels_for(t).unary(op, transpose(t, 0, 1), 0.25f);
    expect_close(kernels_for(cuda_device(0)).unary(op, strided_gpu, 0.25f), cpu, 1e-5f, 2e-6f,
                 std::string(op_name(op)) + " transposed");
  }
}

TEST(CudaKernels, EveryBinaryCodeEqualsTheCpuWithBroadcasting) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  struct Shapes {
    Shape a, b;
  };
  for (int code = 0; code <= static_cast<int>(BinaryOp::kGeluGrad); ++code) {
    const auto op = static_cast<BinaryOp>(code);
    const bool positive = op == BinaryOp::kPow || op == BinaryOp::kPowBaseGrad || op == BinaryOp::kPowExponentGrad ||
                          op == BinaryOp::kSqrtGrad || op == BinaryOp::kDiv || op == BinaryOp::kDivisorGrad;
    for (const Shapes& s : {Shapes{{6, 10}, {6, 10}}, Shapes{{6, 10}, {10}}, Shapes{{4, 1, 3}, {5, 1}},
                            Shapes{{}, {3, 2}}}) {
      Tensor a = operand(s.a, 7 + code, positive), b = operand(s.b, 70 + code, positive);
      if (op == BinaryOp::kKeepWhere || op == BinaryOp::kDropWhere || op == BinaryOp::kFillWhere)
        b = gt(b, 0.0f);  // a mask
      Tensor cpu = kernels_for(a).binary(op, a, b, 1.5f);
      Tensor gpu = kernels_for(cuda_device(0)).binary(op, a.cuda(), b.cuda(), 1.5f);
      expect_close(gpu, cpu, 1e-5f, op == BinaryOp::kGeluGrad ? 2e-6f : 1e-7f,
                   std::string(op_name(op)) + " " + shape_str(s.a) + " with " + shape_str(s.b));
    }
  }
}

// The ops themselves on the device: a forward and backward through the table, against the CPU.
TEST(CudaKernels, ElementwiseOpsAndTheirGradientsEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor x = randn({8, 16}), w = randn({8, 16});  // no broadcast: its backward would sum, which has no CUDA kernel yet
  auto run = [&](Device device) {
    Tensor xs = x.to(device).set_requires_grad(true);
    Tensor ws = w.to(device).set_requires_grad(true);
    Tensor y = mul(gelu(add(xs, ws)), sigmoid(xs));
    Tensor loss_grad = ones_like(y);
    y.backward(loss_grad);
    return std::vector<Tensor>{y.cpu(), xs.grad().cpu(), ws.grad().cpu()};
  };
  const auto cpu = run(cpu_device()), gpu = run(cuda_device(0));
  for (size_t i = 0; i < cpu.size(); ++i) expect_close(gpu[i], cpu[i], 1e-5f, 2e-6f, "output/grad " + std::to_string(i));
}

TEST(CudaKernels, CopiesConvertAndKeepLayouts) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor f = randn({6, 7});
  Tensor on_device = f.cuda();
  // Strided to contiguous, and a broadcast source into a strided destination.
  expect_close(contiguous(transpose(on_device, 0, 1)), contiguous(transpose(f, 0, 1)), 0, 0, "transpose copy");
  Tensor dst = zeros({7, 6}).cuda();
  Tensor dst_view = transpose(dst, 0, 1);
  copy_(dst_view, on_device);
  expect_close(dst, contiguous(transpose(f, 0, 1)), 0, 0, "copy into a transposed view");
  // dtype conversions equal the CPU's bit for bit.
  for (DType to : {DType::BFloat16, DType::Float16, DType::Int64}) {
    Tensor gpu = to_dtype(on_device, to).cpu(), cpu = to_dtype(f, to);
    EXPECT_EQ(std::memcmp(gpu.raw_data(), cpu.raw_data(), static_cast<size_t>(cpu.numel()) * dtype_size(to)), 0)
        << dtype_name(to);
  }
  Tensor filled = ones_like(on_device);
  expect_close(filled, ones({6, 7}), 0, 0, "ones_like");
  mul_(filled, 3.0f);
  add_(filled, on_device, 0.5f);
  expect_close(filled, add(mul(f, 0.5f), 3.0f), 1e-6f, 1e-6f, "mul_ and add_");
}

TEST(CudaKernels, SumsAndSoftmaxEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor x = randn({4, 5, 300});
  Tensor xd = x.cuda();
  for (const Shape& dims : {Shape{}, Shape{2}, Shape{0}, Shape{0, 2}, Shape{1}}) {
    expect_close(sum(xd, dims, false), sum(x, dims, false), 1e-5f, 1e-5f, "sum over " + shape_str(dims));
    expect_close(sum(xd, dims, true), sum(x, dims, true), 1e-5f, 1e-5f, "sum keepdim over " + shape_str(dims));
  }
  EXPECT_NEAR(squared_norm(xd), squared_norm(x), 1e-9 * squared_norm(x));
  for (bool log_space : {false, true}) {
    auto run = [&](Device device) {
      Tensor in = x.to(device).set_requires_grad(true);
      Tensor y = log_space ? log_softmax(in, -1) : softmax(in, 1);
      y.backward(ones_like(y));  // a broadcast-free gradient: sum's and softmax's backward on the device
      return std::vector<Tensor>{y.cpu(), in.grad().cpu()};
    };
    const auto cpu = run(cpu_device()), gpu = run(cuda_device(0));
    expect_close(gpu[0], cpu[0], 1e-5f, 1e-6f, log_space ? "log_softmax" : "softmax");
    expect_close(gpu[1], cpu[1], 1e-4f, 1e-5f, log_space ? "log_softmax backward" : "softmax backward");
  }
  // A row of -inf (a fully masked attention row) is NaN on both.
  Tensor masked = full({2, 3}, -std::numeric_limits<float>::infinity());
  expect_close(softmax(masked.cuda(), 1), softmax(masked, 1), 0, 0, "masked row");
}

TEST(CudaKernels, FusedUpdatesEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t n = 100003;
  Tensor p = randn({n}), g = randn({n}), m = zeros({n}), v = zeros({n});
  Tensor pd = p.cuda(), gd = g.cuda(), md = m.cuda(), vd = v.cuda();
  const AdamStep adam{0.01f, 0.5f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.001f, true};
  adam_update_(p, g, m, v, adam);
  adam_update_(pd, gd, md, vd, adam);
  expect_close(pd, p, 1e-6f, 1e-7f, "adamw parameter");
  expect_close(vd, v, 1e-6f, 0, "adamw second moment");
  Tensor buffer = zeros({n}), buffer_d = buffer.cuda();
  const SgdStep sgd{0.1f, 0.9f, 0.0f, 0.01f, true, true};
  sgd_update_(p, g, buffer, sgd);
  sgd_update_(pd, gd, buffer_d, sgd);
  expect_close(pd, p, 1e-6f, 1e-7f, "sgd parameter");
  Tensor none;
  lars_update_(p, g, none, 0.2f, 0.1f, 0.0f);
  lars_update_(pd, gd, none, 0.2f, 0.1f, 0.0f);
  expect_close(pd, p, 1e-6f, 1e-7f, "lars parameter");
}

}  // namespace
}  // namespace tessera
