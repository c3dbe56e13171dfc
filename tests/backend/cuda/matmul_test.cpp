// matmul and linear on CUDA (the kernel table's matmul over cuBLASLt, backend/cuda/gemm.h) against
// the CPU: plain, batched with broadcasting, transposed and unevenly strided operands, 1-D operands,
// an empty inner dim, linear's bias epilogue, every gradient, and bf16 / fp16 autocast. Tolerances:
// the two devices sum the k products in different orders, so each element may differ by about
// k · 2⁻²⁴ of the sum of |products|; 1e-4 relative and 1e-5 · √k absolute cover that at these sizes
// (measured CPU-vs-CPU spread between oneDNN and OpenBLAS: below 2e-6). Under bf16 both devices
// round each operand to bf16 the same way (nearest even) and accumulate in float32: 2e-3.
#include <gtest/gtest.h>

#include <cmath>
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
  const std::vector<float> g = gpu.cpu().contiguous().to_vector<float>(), c = cpu.contiguous().to_vector<float>();
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(g[i], c[i], atol + rtol * std::fabs(c[i])) << what << " element " << i;
}

Tensor operand(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, gen);
}

// matmul(a, b) on both devices, forward and both gradients (through a weighted sum so every output
// element's gradient differs).
void expect_matmul_matches(const Tensor& a_cpu, const Tensor& b_cpu, const std::string& what, float rtol = 1e-4f) {
  const int64_t k = a_cpu.dim() == 1 ? a_cpu.shape()[0] : a_cpu.shape()[a_cpu.dim() - 1];
  const float atol = 1e-5f * std::sqrt(static_cast<float>(k) + 1.0f);
  Tensor a = a_cpu.detach().set_requires_grad(true), b = b_cpu.detach().set_requires_grad(true);
  Tensor ag = a_cpu.cuda().detach().set_requires_grad(true), bg = b_cpu.cuda().detach().set_requires_grad(true);
  Tensor out = matmul(a, b), out_g = matmul(ag, bg);
  expect_close(out_g, out, rtol, atol, what + " forward");
  Tensor weights = operand(out.shape(), 99);
  sum(mul(out, weights)).backward();
  sum(mul(out_g, weights.cuda())).backward();
  expect_close(ag.grad(), a.grad(), rtol, atol * 4, what + " grad a");
  expect_close(bg.grad(), b.grad(), rtol, atol * 4, what + " grad b");
}

TEST(CudaMatmul, PlainProductsEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  expect_matmul_matches(operand({37, 65}, 1), operand({65, 29}, 2), "(37, 65) @ (65, 29)");
  expect_matmul_matches(operand({1, 300}, 3), operand({300, 1}, 4), "row @ column");
  expect_matmul_matches(operand({256, 512}, 5), operand({512, 128}, 6), "(256, 512) @ (512, 128)");
}

TEST(CudaMatmul, BatchedAndBroadcastProductsEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  expect_matmul_matches(operand({6, 8, 16}, 7), operand({6, 16, 5}, 8), "batched");
  expect_matmul_matches(operand({3, 1, 8, 16}, 9), operand({4, 16, 5}, 10), "broadcast batch dims");
  expect_matmul_matches(operand({2, 3, 9, 4}, 11), operand({4, 7}, 12), "a matrix broadcast to every item");
}

TEST(CudaMatmul, StridedOperandsEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  // Transposed views are read as column-major, without a copy.
  expect_matmul_matches(transpose(operand({40, 24}, 13), 0, 1), operand({40, 17}, 14), "transposed a");
  expect_matmul_matches(operand({24, 40}, 15), transpose(operand({17, 40}, 16), 0, 1), "transposed b");
  // Attention's layout: heads split out of the feature dim, so batch items sit at uneven steps.
  Tensor qkv = operand({2, 10, 3, 4, 8}, 17);  // (B, T, 3, heads, d)
  auto part = [&](int64_t i) { return squeeze(slice(qkv, 2, i, i + 1), 2); };
  Tensor q = permute(part(0), {0, 2, 1, 3}), k = permute(part(1), {0, 2, 3, 1});
  expect_matmul_matches(q, k, "attention scores over permuted views");
  // Every other column: no unit stride in either dim, copied first.
  expect_matmul_matches(slice(operand({12, 30}, 18), 1, 0, 30, 2), operand({15, 6}, 19), "a sliced with step 2");
}

TEST(CudaMatmul, VectorsAndEmptyInnerDims) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  expect_matmul_matches(operand({33}, 20), operand({33, 7}, 21), "vector @ matrix");
  expect_matmul_matches(operand({5, 33}, 22), operand({33}, 23), "matrix @ vector");
  Tensor empty = matmul(Tensor::empty({4, 0}, DType::Float32, cuda_device(0)), Tensor::empty({0, 3}, DType::Float32, cuda_device(0)));
  expect_close(empty, zeros({4, 3}), 0.0f, 0.0f, "k = 0 gives zeros");
}

TEST(CudaMatmul, LinearWithBiasAndItsGradientsEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  for (bool with_bias : {true, false}) {
    Tensor x = operand({4, 9, 48}, 30).set_requires_grad(true), w = operand({20, 48}, 31).set_requires_grad(true);
    Tensor b = with_bias ? operand({20}, 32).set_requires_grad(true) : Tensor();
    Tensor xg = x.cuda().detach().set_requires_grad(true), wg = w.cuda().detach().set_requires_grad(true);
    Tensor bg = with_bias ? b.cuda().detach().set_requires_grad(true) : Tensor();
    Tensor out = linear(x, w, b), out_g = linear(xg, wg, bg);
    const std::string what = with_bias ? "linear with bias" : "linear";
    expect_close(out_g, out, 1e-4f, 1e-4f, what);
    Tensor weights = operand(out.shape(), 33);
    sum(mul(out, weights)).backward();
    sum(mul(out_g, weights.cuda())).backward();
    expect_close(xg.grad(), x.grad(), 1e-4f, 1e-4f, what + " grad x");
    expect_close(wg.grad(), w.grad(), 1e-4f, 5e-4f, what + " grad w");
    if (with_bias) expect_close(bg.grad(), b.grad(), 1e-4f, 5e-4f, what + " grad bias");
  }
}

TEST(CudaMatmul, AutocastRoundsTheOperandsAsTheCpuDoes) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  for (DType precision : {DType::BFloat16, DType::Float16}) {
    Autocast autocast(precision);
    Tensor a = operand({64, 96}, 40), b = operand({96, 48}, 41);
    expect_close(matmul(a.cuda(), b.cuda()), matmul(a, b), 2e-3f, 2e-3f, std::string(dtype_name(precision)) + " matmul");
    Tensor x = operand({16, 96}, 42), w = operand({32, 96}, 43), bias = operand({32}, 44);
    expect_close(linear(x.cuda(), w.cuda(), bias.cuda()), linear(x, w, bias), 2e-3f, 2e-3f,
                 std::string(dtype_name(precision)) + " linear");
  }
}

TEST(CudaMatmul, Tf32OnlyWhenAskedAndThenWithinItsRounding) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  ASSERT_FALSE(allow_tf32());  // off unless asked
  Tensor a = operand({128, 256}, 50), b = operand({256, 64}, 51);
  set_allow_tf32(true);
  Tensor tf32 = matmul(a.cuda(), b.cuda());
  set_allow_tf32(false);
  // 10-bit mantissas: each product within 2^-10 relative, summed over k = 256.
  expect_close(tf32, matmul(a, b), 2e-3f, 2e-2f, "tf32 matmul");
}

TEST(CudaMatmul, OperandsOnTwoDevicesAreAnError) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  EXPECT_THROW(matmul(operand({2, 3}, 1).cuda(), operand({3, 2}, 2)), ValueError);
  EXPECT_THROW(linear(operand({2, 3}, 1).cuda(), operand({4, 3}, 2)), ValueError);
}

}  // namespace
}  // namespace tessera
