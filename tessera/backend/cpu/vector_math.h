// exp and erf for float written without calls or branches, so that loops over them vectorise (the
// libm calls do not: in the GPT's training step, scalar erff and expf inside GELU took 18% of the
// time). Both are within a few float ulps of libm:
//   exp:  x = n·ln2 + r with |r| <= ln2/2, and e^r by its Taylor series to r^7 (the first term left
//         out, r^8/8!, is below 5.5e-9 relative there); 2^n built in the exponent bits. For
//         x <= 88 (tessera calls it on x <= 0); below -87.3 it returns about 1e-38 instead of 0.
//         Measured: within 1.7 ulp (9.7e-8 relative) of exp (double) over [-87.3, 88].
//   erf:  Abramowitz & Stegun 7.1.26 (Handbook of Mathematical Functions, 1964), a rational
//         approximation with absolute error below 1.5e-7; measured in float: below 6e-7.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace tessera::cpu {

// ReLU of one value, NaN to 0. relu and relu_max_pool2d both call it, so they agree bit for bit.
[[gnu::always_inline]] inline float relu_value(float x) { return x > 0.0f ? x : 0.0f; }

[[gnu::always_inline]] inline float exp_vectorisable(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2High = 0.693145751953125f, kLn2Low = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23: adding it rounds to the nearest integer
  // n as a float and as an integer, both read off the rounded sum. No float comparison and no
  // float-to-int conversion: under -ftrapping-math either keeps GCC from vectorising the loop.
  const float shifted = x * kLog2e + kRound;
  const float n = shifted - kRound;
  const int32_t n_int = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound);
  const float r = (x - n * kLn2High) - n * kLn2Low;
  float p = 1.0f + r * (1.0f / 7.0f);
  p = 1.0f + r * (1.0f / 6.0f) * p;
  p = 1.0f + r * (1.0f / 5.0f) * p;
  p = 1.0f + r * (1.0f / 4.0f) * p;
  p = 1.0f + r * (1.0f / 3.0f) * p;
  p = 1.0f + r * (1.0f / 2.0f) * p;
  p = 1.0f + r * p;
  // 2^n, its exponent clamped in integers to float's normal range: below x = -87.3 the result stays
  // at about 2^-126 instead of reaching 0.
  const int32_t exponent = std::min(std::max(n_int, -126), 127);
  return p * std::bit_cast<float>(static_cast<uint32_t>(exponent + 127) << 23);
}

// e^x for x <= 0, as softmax needs it (each score minus its row's maximum): exactly 0 below -87
// (a masked score, -inf, contributes nothing, as with libm), and otherwise exp_vectorisable. The
// test is on the bits, as unsigned integers: a float below -87 is one whose bits are above -87's.
// Not for NaN (callers send rows holding a NaN to libm) nor positive x beyond 88.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  constexpr uint32_t kLowest = std::bit_cast<uint32_t>(-87.0f);
  const bool underflows = std::bit_cast<uint32_t>(x) > kLowest;
  const float e = exp_vectorisable(underflows ? -87.0f : x);
  return underflows ? 0.0f : e;
}

// The sum of term(0) .. term(n - 1) in 16 running lanes, added pairwise at the end: a loop GCC
// vectorises, where a single running sum is one add per element in sequence (floats may not be
// reassociated). The order is fixed by n alone, so a sum is the same on every run and thread.
template <typename Term>
[[gnu::always_inline]] inline float sum_in_lanes_of(int64_t n, const Term& term) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += term(i + j);
  for (int j = 0; i < n; ++i, ++j) lanes[j] += term(i);
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) lanes[j] += lanes[j + width];
  return lanes[0];
}

[[gnu::always_inline]] inline float sum_in_lanes(const float* x, int64_t n) {
  return sum_in_lanes_of(n, [x](int64_t i) { return x[i]; });
}

[[gnu::always_inline]] inline float dot_in_lanes(const float* x, const float* y, int64_t n) {
  return sum_in_lanes_of(n, [x, y](int64_t i) { return x[i] * y[i]; });
}

// Whether any of n floats is NaN, read off the bits (an integer test, so the loop vectorises).
[[gnu::always_inline]] inline bool any_nan(const float* x, int64_t n) {
  uint32_t found = 0;
  for (int64_t i = 0; i < n; ++i) found |= (std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu) > 0x7f800000u;
  return found != 0;
}

[[gnu::always_inline]] inline float erf_vectorisable(float x) {
  // |x| capped at 9, where erf is 1 in float, so that -a² stays finite: as integers, since positive
  // floats order as their bits do and an integer min keeps the loop vectorisable (NaN, whose bits
  // are larger, becomes 9: erf(NaN) is ±1 here).
  const float a = std::bit_cast<float>(std::min(std::bit_cast<int32_t>(std::abs(x)), std::bit_cast<int32_t>(9.0f)));
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float y = 1.0f - poly * exp_vectorisable(-a * a);
  return std::copysign(y, x);
}

}  // namespace tessera::cpu
