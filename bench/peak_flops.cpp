// The machine's FP32 peak, measured rather than assumed: independent FMA chains that stay in
// registers, so the loop is bound by the FMA units alone (shared/BENCHMARKING.md: ≈105 GFLOP/s per
// core here with AVX-512).
#include <immintrin.h>
#include <omp.h>

#include <chrono>

#include "bench/bench.h"

namespace tessera::bench {

namespace {

constexpr int64_t kIterations = 20'000'000;

// The first lane of the chains' sum, read through memory: the result must be used, or the loop is
// dead code. (GCC 12's _mm512_reduce_add_ps warns of an uninitialised __Y inside its own header.)
__attribute__((target("avx512f"))) float first_lane(__m512 s) {
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f"))) double fma_loop_avx512() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIterations; ++it)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return first_lane(s) > 0 ? 12.0 * 16 * 2 * kIterations : 0.0;  // flops
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2() {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIterations; ++it)
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] > 0 ? 12.0 * 8 * 2 * kIterations : 0.0;
}

// vdpbf16ps: each 32-bit lane multiplies two bf16 pairs and adds both to its fp32 accumulator, so an
// instruction is 16 lanes × 2 products × 2 flops.
__attribute__((target("avx512f,avx512bf16"))) double dpbf16_loop() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);  // 1.0, ~6e-8
  for (int64_t it = 0; it < kIterations; ++it)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return first_lane(s) > 0 ? 12.0 * 16 * 4 * kIterations : 0.0;
}

}  // namespace

double measure_bf16_peak_gflops(int threads) {
  if (!__builtin_cpu_supports("avx512bf16")) return 0.0;
  double flops = 0.0;
  auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
  flops += dpbf16_loop();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return flops / seconds / 1e9;
}

double measure_fma_peak_gflops(int threads) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  double flops = 0.0;
  auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
  flops += avx512 ? fma_loop_avx512() : fma_loop_avx2();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return flops / seconds / 1e9;
}

}  // namespace tessera::bench
