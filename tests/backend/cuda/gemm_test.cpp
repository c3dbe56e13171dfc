#include "tessera/backend/cuda/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tessera/backend/cpu/gemm.h"
#include "tessera/backend/cuda/convert.h"
#include "tessera/backend/cuda/device_info.h"
#include "tessera/core/half_codec.h"
#include "testing/cuda_device.h"

namespace tessera::cuda {
namespace {

struct GemmCase {
  GemmPrecision precision;
  int64_t m, n, k;
};
void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << gemm_precision_name(c.precision) << " (" << c.m << ", " << c.k << ") x (" << c.k << ", " << c.n << ")";
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (float& x : out) x = normal(rng);
  return out;
}

// A (m, k) and B (k, n) to the device in the precision's input type: float32 as is, bfloat16 rounded
// on the device (cuda::float_to_bfloat16).
DeviceBuffer upload(const std::vector<float>& host, GemmPrecision precision) {
  DeviceBuffer f32(0, host.size() * 4);
  f32.copy_from_host(host.data(), host.size() * 4);
  if (precision != GemmPrecision::kBFloat16) return f32;
  DeviceBuffer bf16(0, host.size() * 2);
  float_to_bfloat16(f32, bf16, static_cast<int64_t>(host.size()));
  return bf16;
}

class CudaGemm : public ::testing::TestWithParam<GemmCase> {};

// The GPU's C against cpu::gemm's, element by element, within the rounding each precision allows
// relative to Σ|a||b| (the scale of the element's terms; Higham's bound for a sum of k products is
// k·u of it, for each of the two sums). bfloat16 is checked against the CPU product of the same
// rounded inputs, so only the order of summation differs; tf32's inputs are rounded inside the
// tensor cores (to nearest or toward zero, unspecified), so its bound adds 2·2^-10 for them.
TEST_P(CudaGemm, EqualsTheCpuProductWithinItsRounding) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [precision, m, n, k] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(m * 131 + n * 7 + k));
  std::vector<float> a = random_matrix(m, k, rng), b = random_matrix(k, n, rng);
  DeviceBuffer a_device = upload(a, precision), b_device = upload(b, precision);
  if (precision == GemmPrecision::kBFloat16) {
    round_through_half(HalfFormat::Bf16, a.data(), a.data(), static_cast<int64_t>(a.size()));
    round_through_half(HalfFormat::Bf16, b.data(), b.data(), static_cast<int64_t>(b.size()));
  }
  DeviceBuffer c_device(0, static_cast<size_t>(m * n) * 4);
  gemm(precision, a_device, b_device, c_device, m, n, k);
  std::vector<float> c_gpu(static_cast<size_t>(m * n), -1.0f);
  c_device.copy_to_host(c_gpu.data(), c_gpu.size() * 4);

  std::vector<float> c_cpu(static_cast<size_t>(m * n), -1.0f), abs_a(a.size()), abs_b(b.size()),
      scale(static_cast<size_t>(m * n), 0.0f);
  for (size_t i = 0; i < a.size(); ++i) abs_a[i] = std::fabs(a[i]);
  for (size_t i = 0; i < b.size(); ++i) abs_b[i] = std::fabs(b[i]);
  if (k > 0) {
    cpu::gemm({a.data(), m, k, k, 1}, {b.data(), k, n, n, 1}, c_cpu.data(), n);
    cpu::gemm({abs_a.data(), m, k, k, 1}, {abs_b.data(), k, n, n, 1}, scale.data(), n);
  } else {
    std::fill(c_cpu.begin(), c_cpu.end(), 0.0f);
  }
  const double u = std::ldexp(1.0, -24);
  const double relative = 2.0 * static_cast<double>(k) * u + (precision == GemmPrecision::kTensorFloat32 ? 2.0 * std::ldexp(1.0, -10) : 0.0);
  int reported = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    const double bound = relative * scale[i] * 1.01 + 1e-30;
    if (std::fabs(static_cast<double>(c_gpu[i]) - c_cpu[i]) > bound && reported++ < 5)
      ADD_FAILURE() << gemm_precision_name(precision) << " (" << m << ", " << k << ") x (" << k << ", " << n << ") C["
                    << i / n << ", " << i % n << "]: GPU " << c_gpu[i] << ", CPU " << c_cpu[i] << ", bound " << bound;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGemm,
    ::testing::Values(GemmCase{GemmPrecision::kFloat32, 1, 1, 1}, GemmCase{GemmPrecision::kFloat32, 17, 33, 65},
                      GemmCase{GemmPrecision::kFloat32, 128, 256, 512}, GemmCase{GemmPrecision::kFloat32, 3, 1000, 7},
                      GemmCase{GemmPrecision::kFloat32, 5, 4, 0}, GemmCase{GemmPrecision::kTensorFloat32, 64, 96, 128},
                      GemmCase{GemmPrecision::kTensorFloat32, 31, 17, 255}, GemmCase{GemmPrecision::kBFloat16, 64, 64, 64},
                      GemmCase{GemmPrecision::kBFloat16, 256, 128, 1024}, GemmCase{GemmPrecision::kBFloat16, 8, 24, 16}),
    [](const ::testing::TestParamInfo<GemmCase>& info) {
      const GemmCase& c = info.param;
      return std::string(gemm_precision_name(c.precision)) + "_" + std::to_string(c.m) + "x" + std::to_string(c.k) + "x" +
             std::to_string(c.n);
    });

TEST(CudaGemmChecks, OperandsTooSmallOrOnTwoDevicesAreRefused) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  DeviceBuffer a(0, 4 * 4 * 4), b(0, 4 * 4 * 4), c(0, 4 * 4 * 4), small(0, 8);
  EXPECT_THROW(gemm(GemmPrecision::kFloat32, a, b, small, 4, 4, 4), ValueError);
  EXPECT_THROW(gemm(GemmPrecision::kFloat32, small, b, c, 4, 4, 4), ValueError);
  EXPECT_THROW(gemm(GemmPrecision::kFloat32, a, b, c, -1, 4, 4), ValueError);
  gemm(GemmPrecision::kBFloat16, a, b, c, 4, 4, 4);  // bf16 inputs take half the bytes: these fit
  synchronize(0);
}

}  // namespace
}  // namespace tessera::cuda
