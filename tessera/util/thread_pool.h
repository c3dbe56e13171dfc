// The one intra-op thread pool. It is OpenMP's (libgomp) team, which the OpenMP build of OpenBLAS
// shares, so `set_num_threads(n)` bounds both our loops and the BLAS calls: one pool, never two
// fighting over the cores.
#pragma once
#include <algorithm>
#include <cstdint>
#include <omp.h>

namespace tessera {

// Sets the pool size once at start-up (--threads / TESSERA_NUM_THREADS); also bounds OpenBLAS.
void set_num_threads(int n);
int num_threads();
// Reads TESSERA_NUM_THREADS if set (else leaves the OpenMP default); returns the size in force.
int init_threads_from_env();
// OpenMP keeps the team size per thread: a std::thread starts with the default (all cores), not
// with set_num_threads' value, and oneDNN sizes its work by it. A thread that runs ops calls this
// first (tessera serve's replicas, one thread each, ran their convolutions on two and spun).
void adopt_num_threads();

namespace detail {
int omp_threads_for(int64_t work_items, int64_t grain);
bool in_parallel_region();
}  // namespace detail

// Calls f(begin, end) on disjoint chunks of [begin, end) in parallel when there is more than `grain`
// work per thread; serially otherwise (small tensors are faster on one core than after a wake-up).
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int threads = detail::in_parallel_region() ? 1 : detail::omp_threads_for(n, grain);
  if (threads <= 1) {
    f(begin, end);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int64_t t = omp_get_thread_num();
    int64_t chunk = (n + threads - 1) / threads;
    int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
    if (b < e) f(b, e);
  }
}

}  // namespace tessera
