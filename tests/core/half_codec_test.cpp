// The 2-byte codecs of the fp16 and bf16 comm hooks against known bit patterns, every fp16 value,
// and (where the compiler targets F16C) the hardware conversion on a sweep of float32 patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "tessera/core/half_codec.h"

namespace tessera {
namespace {



using tessera::HalfFormat;

TEST(CommHookCodec, Fp16EncodesKnownValues) {
  EXPECT_EQ(fp16_from_float(1.0f), 0x3C00);
  EXPECT_EQ(fp16_from_float(-2.0f), 0xC000);
  EXPECT_EQ(fp16_from_float(0.0f), 0x0000);
  EXPECT_EQ(fp16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(fp16_from_float(0.1f), 0x2E66);
  EXPECT_EQ(fp16_from_float(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(fp16_from_float(65504.0f), 0x7BFF);         // the largest finite fp16
  EXPECT_EQ(fp16_from_float(0x1p-14f), 0x0400);         // the smallest normal
  EXPECT_EQ(fp16_from_float(0x1p-24f), 0x0001);         // the smallest subnormal
  EXPECT_EQ(fp16_from_float(1023 * 0x1p-24f), 0x03FF);  // the largest subnormal
  EXPECT_EQ(fp16_from_float(-0x1p-24f), 0x8001);
}

TEST(CommHookCodec, Fp16RoundsTiesToEven) {
  EXPECT_EQ(fp16_from_float(1.0f + 0x1p-11f), 0x3C00);             // halfway 0x3C00 / 0x3C01: even is 0x3C00
  EXPECT_EQ(fp16_from_float(1.0f + 3 * 0x1p-11f), 0x3C02);         // halfway 0x3C01 / 0x3C02
  EXPECT_EQ(fp16_from_float(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // just above halfway
  EXPECT_EQ(fp16_from_float(2049.0f), 0x6800);                     // 2048 and 2050 are neighbours: 2049 goes to 2048
  EXPECT_EQ(fp16_from_float(2051.0f), 0x6802);                     // and 2051 to 2052
  // Subnormals: units of 2^-24.
  EXPECT_EQ(fp16_from_float(0x1p-25f), 0x0000);      // halfway 0 / 1 unit: even is 0
  EXPECT_EQ(fp16_from_float(3 * 0x1p-25f), 0x0002);  // halfway 1 / 2 units
  EXPECT_EQ(fp16_from_float(5 * 0x1p-25f), 0x0002);  // halfway 2 / 3 units
  EXPECT_EQ(fp16_from_float(0x1p-25f * 1.0000001f), 0x0001);
  EXPECT_EQ(fp16_from_float(0x1p-26f), 0x0000);
  // The largest subnormal plus half a unit is a tie that carries into the smallest normal.
  EXPECT_EQ(fp16_from_float(1023.5f * 0x1p-24f), 0x0400);
}

TEST(CommHookCodec, Fp16OverflowsToInfinity) {
  EXPECT_EQ(fp16_from_float(65519.0f), 0x7BFF);  // below 65504 + half an ulp (16)
  EXPECT_EQ(fp16_from_float(65520.0f), 0x7C00);  // the tie rounds to even: past the largest finite
  EXPECT_EQ(fp16_from_float(1e10f), 0x7C00);
  EXPECT_EQ(fp16_from_float(-1e10f), 0xFC00);
  EXPECT_EQ(fp16_from_float(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(fp16_from_float(-std::numeric_limits<float>::infinity()), 0xFC00);
  uint16_t nan = fp16_from_float(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(fp16_to_float(fp16_from_float(-std::numeric_limits<float>::signaling_NaN()))));
}

TEST(CommHookCodec, Fp16DecodesKnownValues) {
  EXPECT_EQ(fp16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_float(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(fp16_to_float(0x0400), 0x1p-14f);
  EXPECT_EQ(fp16_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_float(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7E00)));
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
}

TEST(CommHookCodec, EveryFp16ValueSurvivesARoundTrip) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp16_from_float(f), h) << "fp16 0x" << std::hex << h << " decodes to " << f;
  }
}

#if defined(__F16C__)
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CommHookCodec, Fp16MatchesTheHardwareConversion) {
  // Every 997th float32 bit pattern (about 4.3 million) plus the neighbourhood of every fp16
  // rounding boundary in [2^-26, 2^17), where the rounding decisions are made.
  auto check = [](uint32_t u) {
    float f = from_bits(u);
    if (std::isnan(f)) return;
    uint16_t hardware = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(fp16_from_float(f), hardware) << "float bits 0x" << std::hex << u;
  };
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 997) check(static_cast<uint32_t>(u));
  for (uint32_t u = 0x32800000u; u < 0x48000000u; u += 0x1000u)
    for (uint32_t d : {0xFFFu, 0x1000u, 0x1001u}) check(u + d);
}
#endif

TEST(CommHookCodec, Bf16RoundsTiesToEven) {
  uint16_t code = 0;
  auto bf16 = [&](float f) {
    encode_half(HalfFormat::Bf16, &f, &code, 1);
    return code;
  };
  EXPECT_EQ(bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16(1.0f + 0x1p-8f), 0x3F80);      // halfway 0x3F80 / 0x3F81
  EXPECT_EQ(bf16(1.0f + 3 * 0x1p-8f), 0x3F82);  // halfway 0x3F81 / 0x3F82
  EXPECT_EQ(bf16(-2.0f), 0xC000);
  float back = 0;
  decode_half(HalfFormat::Bf16, &code, &back, 1);
  EXPECT_EQ(back, -2.0f);
}

TEST(HalfCodec, BufferCodecsEqualTheScalarOnesForEveryCodeAndAssortedFloats) {
  // encode_half/decode_half take a vector path (F16C) for whole blocks of 8 and the scalar one for
  // the rest; both must give the same bits.
  std::vector<uint16_t> all_codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) all_codes[c] = static_cast<uint16_t>(c);
  std::vector<float> decoded(all_codes.size());
  decode_half(HalfFormat::Fp16, all_codes.data(), decoded.data(), static_cast<int64_t>(decoded.size()));
  for (uint32_t c = 0; c < 65536; ++c) {
    float scalar = fp16_to_float(static_cast<uint16_t>(c));
    ASSERT_EQ(std::memcmp(&scalar, &decoded[c], 4), 0) << "code " << c;
  }
  std::vector<float> values = {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 1e9f, -1e9f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f,
                               std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                               1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-12f, -3.14159f};
  for (uint32_t k = 0; k < 100000; ++k) {  // a spread of bit patterns, NaNs included
    uint32_t bits = k * 2654435761u;
    float f;
    std::memcpy(&f, &bits, 4);
    values.push_back(f);
  }
  std::vector<uint16_t> encoded(values.size());
  encode_half(HalfFormat::Fp16, values.data(), encoded.data(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(encoded[i], fp16_from_float(values[i])) << "value " << values[i];
}

}  // namespace
}  // namespace tessera
