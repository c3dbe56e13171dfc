// tessera bench matmul: GFLOP/s of the sgemm path (tessera::matmul) at n×n against the FP32 peak of
// the same number of cores, measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <vector>

#include "bench/bench.h"
#include "tessera/ops/ops.h"
#include "tessera/util/thread_pool.h"

namespace tessera::bench {

int matmul(int n, const std::string& threads_list, int repeats) {
  Generator g(0);
  Tensor a = randn({n, n}, g), b = randn({n, n}, g);
  std::printf("tessera bench matmul: %dx%d float32, best of %d\n", n, n, repeats);
  std::printf("%-8s %-12s %-12s %s\n", "threads", "GFLOP/s", "peak GFLOP/s", "efficiency");
  std::stringstream in(threads_list);
  std::string item;
  while (std::getline(in, item, ',')) {
    int threads = std::stoi(item);
    set_num_threads(threads);
    tessera::matmul(a, b);  // warm-up
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      Tensor c = tessera::matmul(a, b);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    double gflops = 2.0 * n * n * static_cast<double>(n) / best / 1e9;
    double peak = measure_fma_peak_gflops(threads);
    std::printf("%-8d %-12.1f %-12.1f %.0f%%\n", threads, gflops, peak, 100.0 * gflops / peak);
  }
  return 0;
}

}  // namespace tessera::bench
