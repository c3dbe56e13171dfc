#include "tessera/backend/cuda/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tessera/backend/cuda/device_info.h"
#include "tessera/core/half_codec.h"
#include "testing/cuda_device.h"

namespace tessera::cuda {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Every class of float the rounding treats apart, then random bit patterns (every exponent, sign and
// payload), through the GPU and through the CPU codec: bit for bit equal.
TEST(CudaConvert, BFloat16RoundingEqualsTheCpuBitForBit) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, 3.14159265f, 1e-40f, -1e-45f,
                               std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                               from_bits(0x7f800001u),   // a signalling NaN: made quiet, not infinity
                               from_bits(0x3f808000u),   // a tie, even below: rounds down
                               from_bits(0x3f818000u),   // a tie, odd below: rounds up
                               from_bits(0x7f7f8000u)};  // a tie at the top: rounds up to infinity
  std::mt19937 rng(46);
  for (int i = 0; i < (1 << 20) + 3; ++i) values.push_back(from_bits(static_cast<uint32_t>(rng())));
  const int64_t n = static_cast<int64_t>(values.size());

  std::vector<uint16_t> cpu(values.size());
  encode_half(HalfFormat::Bf16, values.data(), cpu.data(), n);

  DeviceBuffer in(0, values.size() * 4), out(0, values.size() * 2);
  in.copy_from_host(values.data(), values.size() * 4);
  float_to_bfloat16(in, out, n);
  std::vector<uint16_t> gpu(values.size());
  out.copy_to_host(gpu.data(), gpu.size() * 2);

  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (gpu[i] != cpu[i] && mismatches++ < 5) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], 4);
      ADD_FAILURE() << "element " << i << " (bits 0x" << std::hex << bits << "): GPU 0x" << gpu[i] << ", CPU 0x" << cpu[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(CudaConvert, CountsThatDoNotFitAreRefused) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  DeviceBuffer in(0, 16), out(0, 8);
  EXPECT_THROW(float_to_bfloat16(in, out, 5), ValueError);
  EXPECT_THROW(float_to_bfloat16(in, out, -1), ValueError);
  float_to_bfloat16(in, out, 0);
}

}  // namespace
}  // namespace tessera::cuda
