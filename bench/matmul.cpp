// tessera bench matmul: GFLOP/s of the float32 GEMM path (tessera::matmul: cpu::gemm) at n×n against the FP32 peak of
// the same number of cores, and of the bf16 path (under Autocast(BFloat16): the operands rounded to
// bf16, oneDNN's matmul) against the bf16 dot-product peak, all measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <vector>

#include "bench/bench.h"
#include "tessera/autograd/autocast.h"
#include "tessera/backend/cpu/bf16_gemm.h"
#include "tessera/ops/ops.h"
#include "tessera/util/thread_pool.h"

namespace tessera::bench {

int matmul(int n, const std::string& threads_list, int repeats) {
  Generator g(0);
  Tensor a = randn({n, n}, g), b = randn({n, n}, g);
  std::printf("tessera bench matmul: %dx%d, best of %d; bf16 on oneDNN's %s\n", n, n, repeats,
              cpu::gemm_bf16_implementation(n, n, n).c_str());
  // The vdpbf16ps loop is AVX-512 BF16's peak; an AMX implementation (amx_bf16) can pass it.
  std::printf("%-8s %-12s %-12s %-11s %-12s %-14s %-11s %s\n", "threads", "fp32 GFLOP/s", "fp32 peak", "efficiency",
              "bf16 GFLOP/s", "vdpbf16ps peak", "of it", "bf16/fp32");
  std::stringstream in(threads_list);
  std::string item;
  while (std::getline(in, item, ',')) {
    int threads = std::stoi(item);
    set_num_threads(threads);
    auto rate = [&](DType precision) {
      Autocast scope(precision);
      tessera::matmul(a, b);  // warm-up (and the bf16 primitive's creation)
      double best = 1e30;
      for (int r = 0; r < repeats; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        Tensor c = tessera::matmul(a, b);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      return 2.0 * n * n * static_cast<double>(n) / best / 1e9;
    };
    const double fp32 = rate(DType::Float32), bf16 = rate(DType::BFloat16);
    const double peak = measure_fma_peak_gflops(threads), bf16_peak = measure_bf16_peak_gflops(threads);
    std::printf("%-8d %-12.1f %-12.1f %-10.0f%% %-12.1f %-14.1f %-10.0f%% %.2fx\n", threads, fp32, peak, 100.0 * fp32 / peak,
                bf16, bf16_peak, bf16_peak > 0 ? 100.0 * bf16 / bf16_peak : 0.0, bf16 / fp32);
  }
  return 0;
}

}  // namespace tessera::bench
