// The kernel table (ops/kernels.h): the CPU's is complete for the ops it carries, a device without a
// kernel names the op and the device instead of computing anywhere else, and the fused optimizer
// updates check their operands and compute what the optimizers' formulas say, element by element,
// whether the parameter is updated whole (the optimizers) or one row at a time (the parameter servers).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tessera/backend/cpu/optimizer_update.h"
#include "tessera/ops/kernels.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

namespace tessera {
namespace {

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const NotSupportedError& e) {
    return e.what();
  }
  return "";
}

TEST(KernelTable, EachDeviceKindHasItsTable) {
  EXPECT_EQ(kernels_for(cpu_device()).device(), DeviceType::CPU);
  EXPECT_EQ(kernels_for(cuda_device(0)).device(), DeviceType::CUDA);
  EXPECT_EQ(&kernels_for(randn({2})), &kernels_for(cpu_device()));
}

// A device's table that lacks a kernel names the op and the device, and no entry computes on the
// CPU in its place (the arguments are never read, so undefined tensors serve). The CUDA table has
// every entry now, so a table that overrides nothing stands in for a device's first steps.
class NoKernels final : public Kernels {
 public:
  NoKernels() : Kernels(DeviceType::CUDA) {}
};

TEST(KernelTable, AMissingKernelNamesTheOpAndTheDevice) {
  const NoKernels cuda;
  Tensor none;
  const std::string norm_message = message_of([&] { cuda.layer_norm(none, none, none, 1, 1e-5f); });
  EXPECT_NE(norm_message.find("[layer_norm] has no kernel on cuda"), std::string::npos) << norm_message;
  const std::string lamb_message = message_of([&] { cuda.lamb_moments(none, none, none, none, LambStep{}); });
  EXPECT_NE(lamb_message.find("[lamb_moments]"), std::string::npos) << lamb_message;
  EXPECT_THROW(cuda.max(none, 0, false), NotSupportedError);
  EXPECT_THROW(cuda.cross_entropy(none, none, CrossEntropyOptions{}), NotSupportedError);
  EXPECT_THROW(cuda.embedding(none, none), NotSupportedError);
}

TEST(KernelTable, EveryOpCodeHasAName) {
  for (int op = 0; op <= static_cast<int>(UnaryOp::kNonzero); ++op)
    EXPECT_STRNE(op_name(static_cast<UnaryOp>(op)), "unary") << op;
  for (int op = 0; op <= static_cast<int>(BinaryOp::kGeluGrad); ++op)
    EXPECT_STRNE(op_name(static_cast<BinaryOp>(op)), "binary") << op;
}

// The ops route through the table: an elementwise formula on a broadcast, strided operand equals
// the same formula on a contiguous copy.
TEST(KernelTable, StridedAndBroadcastOperandsGiveTheContiguousResult) {
  Generator gen(7);
  Tensor a = randn({4, 3}, gen), b = randn({3}, gen);
  Tensor at = transpose(randn({3, 4}, gen), 0, 1);
  EXPECT_EQ(tanh(at).to_vector<float>(), tanh(contiguous(at)).to_vector<float>());
  EXPECT_EQ(gelu(at).to_vector<float>(), gelu(contiguous(at)).to_vector<float>());
  EXPECT_EQ(mul(at, b).to_vector<float>(), mul(contiguous(at), expand(b, {4, 3}).contiguous()).to_vector<float>());
  EXPECT_EQ(masked_fill(a, gt(b, 0.0f), 5.0f).to_vector<float>(),
            where(expand(gt(b, 0.0f), {4, 3}), full({4, 3}, 5.0f), a).to_vector<float>());
}

// ---- the fused optimizer updates ----

struct UpdateCase {
  Tensor param, grad;
  std::vector<float> p0, g;
};

UpdateCase update_case(int64_t n, uint64_t seed) {
  Generator gen(seed);
  UpdateCase c;
  c.param = randn({n}, gen);
  c.grad = randn({n}, gen);
  c.p0 = c.param.to_vector<float>();
  c.g = c.grad.to_vector<float>();
  return c;
}

// Large enough to be split across the intra-op threads (the kernels' grain is 32768 elements).
constexpr int64_t kElements = 70001;

// The CPU's matmul, convolution and pooling entries answer through their ops (cpu_via_ops.cpp): the
// same values and gradients as the ops' own autograd, which is what a device's entries are checked
// against.
TEST(KernelTable, TheCpusConvolutionAndPoolingEntriesEqualTheirOps) {
  const Kernels& cpu = kernels_for(cpu_device());
  Conv2dOptions pad1;
  pad1.pad_h = pad1.pad_w = 1;
  Tensor x = randn({2, 3, 6, 5}).set_requires_grad(true), w = randn({4, 3, 3, 3}).set_requires_grad(true);
  Tensor b = randn({4}).set_requires_grad(true);
  Tensor out = conv2d(x, w, b, pad1);
  EXPECT_TRUE(testing::bitwise_equal(cpu.conv2d(x, w, b, pad1, DType::Float32), out));
  Tensor g = randn(out.shape());
  out.backward(g);
  LayerGrads grads = cpu.conv2d_backward(x, w, g, pad1, DType::Float32, true, true, true);
  EXPECT_TRUE(testing::bitwise_equal(grads.x, x.grad()));
  EXPECT_TRUE(testing::bitwise_equal(grads.weight, w.grad()));
  EXPECT_TRUE(testing::bitwise_equal(grads.bias, b.grad()));
  EXPECT_FALSE(cpu.conv2d_backward(x, w, g, pad1, DType::Float32, false, true, false).x.defined());

  for (bool relu_first : {false, true}) {
    Tensor y = randn({2, 3, 6, 6}).set_requires_grad(true);
    Tensor pooled = relu_first ? relu_max_pool2d(y) : max_pool2d(y);
    WithSaved r = cpu.max_pool2d(y, Pool2dOptions{}, relu_first);
    EXPECT_TRUE(testing::bitwise_equal(r.out, pooled));
    Tensor gp = randn(pooled.shape());
    pooled.backward(gp);
    EXPECT_TRUE(testing::bitwise_equal(cpu.max_pool2d_backward(gp, r.saved, y.shape(), Pool2dOptions{}, relu_first),
                                       y.grad()));
  }
  Tensor z = randn({1, 2, 4, 4}).set_requires_grad(true);
  Tensor averaged = avg_pool2d(z);
  EXPECT_TRUE(testing::bitwise_equal(cpu.avg_pool2d(z, Pool2dOptions{}), averaged));
  Tensor ga = randn(averaged.shape());
  averaged.backward(ga);
  EXPECT_TRUE(testing::bitwise_equal(cpu.avg_pool2d_backward(ga, z.shape(), Pool2dOptions{}), z.grad()));
}

TEST(FusedUpdate, SgdWithNesterovMomentumFollowsTorchsFormula) {
  UpdateCase c = update_case(kElements, 1);
  Tensor buffer = zeros({kElements});
  const SgdStep first{0.1f, 0.9f, 0.0f, 0.01f, true, true}, later{0.1f, 0.9f, 0.0f, 0.01f, true, false};
  sgd_update_(c.param, c.grad, buffer, first);
  sgd_update_(c.param, c.grad, buffer, later);
  const std::vector<float> p = c.param.to_vector<float>(), b = buffer.to_vector<float>();
  for (int64_t k = 0; k < kElements; k += 997) {
    float w = c.p0[k], buf = 0.0f;
    for (int step = 0; step < 2; ++step) {
      float d = c.g[k] + 0.01f * w;
      buf = step == 0 ? d : 0.9f * buf + (1.0f - 0.0f) * d;
      w -= 0.1f * (d + 0.9f * buf);
    }
    EXPECT_NEAR(p[k], w, 1e-6f * (1.0f + std::fabs(w))) << k;
    EXPECT_NEAR(b[k], buf, 1e-6f * (1.0f + std::fabs(buf))) << k;
  }
}

TEST(FusedUpdate, AdamWFollowsTheDecoupledFormula) {
  UpdateCase c = update_case(kElements, 2);
  Tensor m = zeros({kElements}), v = zeros({kElements});
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  const AdamStep step{lr / (1.0f - b1), std::sqrt(1.0f - b2), b1, b2, eps, wd, lr, true};
  adam_update_(c.param, c.grad, m, v, step);
  const std::vector<float> p = c.param.to_vector<float>();
  for (int64_t k = 0; k < kElements; k += 997) {
    const float g = c.g[k], w = c.p0[k] * (1.0f - lr * wd);
    const float mk = (1.0f - b1) * g, vk = (1.0f - b2) * g * g;
    const float expected = w - (lr / (1.0f - b1)) * mk / (std::sqrt(vk) / std::sqrt(1.0f - b2) + eps);
    EXPECT_NEAR(p[k], expected, 1e-6f * (1.0f + std::fabs(expected))) << k;
  }
}

// A parameter server updates one embedding row at a time with the same arithmetic: row by row equals
// the whole tensor at once, bit for bit.
TEST(FusedUpdate, RowByRowEqualsTheWholeTensor) {
  const int64_t rows = 300, row_size = 257;
  UpdateCase whole = update_case(rows * row_size, 3);
  Tensor by_rows = clone(whole.param);
  Tensor m1 = zeros({rows * row_size}), v1 = zeros({rows * row_size});
  Tensor m2 = zeros({rows * row_size}), v2 = zeros({rows * row_size});
  const AdamStep step{0.01f, 0.5f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.001f, false};
  adam_update_(whole.param, whole.grad, m1, v1, step);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = r * row_size;
    cpu::adam_update(by_rows.data<float>() + off, whole.grad.data<float>() + off, m2.data<float>() + off,
                     v2.data<float>() + off, row_size, step);
  }
  EXPECT_EQ(by_rows.to_vector<float>(), whole.param.to_vector<float>());
  EXPECT_EQ(v2.to_vector<float>(), v1.to_vector<float>());
}

// LAMB's two passes: the norms the first returns are those of the parameter and of the update
// direction; the second applies the direction, recomputed, at the scaled rate.
TEST(FusedUpdate, LambReturnsTheNormsItsStepIsScaledBy) {
  UpdateCase c = update_case(1000, 4);
  Tensor m = zeros({1000}), v = zeros({1000});
  const LambStep step{0.9f, 0.999f, 0.1f, 0.001f, 0.1f, 0.001f, 1e-6f, 0.01f};
  const auto [w_sq, u_sq] = lamb_moments_(c.param, c.grad, m, v, step);
  double w_expected = 0.0, u_expected = 0.0;
  std::vector<float> u(1000);
  for (int64_t k = 0; k < 1000; ++k) {
    const float mk = 0.1f * c.g[k], vk = 0.001f * c.g[k] * c.g[k];
    u[k] = (mk / 0.1f) / (std::sqrt(vk / 0.001f) + 1e-6f) + 0.01f * c.p0[k];
    w_expected += static_cast<double>(c.p0[k]) * c.p0[k];
    u_expected += static_cast<double>(u[k]) * u[k];
  }
  EXPECT_NEAR(w_sq, w_expected, 1e-9 * w_expected);
  EXPECT_NEAR(u_sq, u_expected, 1e-5 * u_expected);
  lamb_apply_(c.param, m, v, step, 0.5f);
  const std::vector<float> p = c.param.to_vector<float>();
  for (int64_t k = 0; k < 1000; k += 37) EXPECT_NEAR(p[k], c.p0[k] - 0.5f * u[k], 1e-5f * (1.0f + std::fabs(p[k]))) << k;
}

TEST(FusedUpdate, LarsWithoutMomentumIsScaledSgd) {
  UpdateCase c = update_case(500, 5);
  Tensor none;
  lars_update_(c.param, c.grad, none, 0.25f, 0.1f, 0.0f);
  const std::vector<float> p = c.param.to_vector<float>();
  for (int64_t k = 0; k < 500; ++k) EXPECT_FLOAT_EQ(p[k], c.p0[k] - 0.25f * (c.g[k] + 0.1f * c.p0[k])) << k;
}

TEST(FusedUpdate, OperandsOfAnotherShapeOrLayoutAreRefusedByName) {
  Tensor param = randn({4, 3}), grad = randn({4, 3}), buffer = zeros({4, 3});
  Tensor wrong_shape = randn({3, 4}), strided = transpose(randn({3, 4}), 0, 1), ints = zeros({4, 3}, DType::Int64);
  const SgdStep step{0.1f, 0.9f, 0.0f, 0.0f, false, false};
  try {
    sgd_update_(param, wrong_shape, buffer, step);
    FAIL() << "a gradient of another shape";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[sgd_update_] grad has shape [3, 4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sgd_update_(param, strided, buffer, step), ValueError);
  EXPECT_THROW(sgd_update_(param, grad, ints, step), ValueError);
  Tensor undefined;
  EXPECT_THROW(sgd_update_(param, undefined, buffer, step), ValueError);
  // Nothing was written by the refused calls.
  const std::vector<float> before = param.to_vector<float>();
  EXPECT_THROW(adam_update_(param, grad, buffer, wrong_shape, AdamStep{}), ValueError);
  EXPECT_EQ(param.to_vector<float>(), before);
}

// An update changes the parameter in place: a graph that saved the old value says so at backward
// instead of differentiating the new one.
TEST(FusedUpdate, AnUpdateMarksTheParameterModified) {
  Tensor w = randn({3}).set_requires_grad(true);
  Tensor y = sum(mul(w, w));
  Tensor grad = ones({3}), buffer;
  {
    NoGradGuard no_grad;
    Tensor target = w.detach();
    sgd_update_(target, grad, buffer, SgdStep{0.1f, 0.0f, 0.0f, 0.0f, false, false});
  }
  EXPECT_THROW(y.backward(), Error);
}

}  // namespace
}  // namespace tessera
