#include "tessera/util/thread_pool.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/util/settings.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace tessera {

namespace {
// Atomic: ranks run as threads in tests each apply their config's thread count.
std::atomic<int> pool_size{0};
}

void set_num_threads(int n) {
  TESSERA_CHECK(n >= 1 && n <= 1024, "[set_num_threads] thread count must be in 1..1024, got ", n);
  pool_size = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() {
  const int n = pool_size.load();
  return n > 0 ? n : omp_get_max_threads();
}

void adopt_num_threads() {
  if (const int n = pool_size.load(); n > 0) omp_set_num_threads(n);
}

int init_threads_from_env() {
  if (const int64_t n = env_int("TESSERA_NUM_THREADS", 0); n > 0) set_num_threads(static_cast<int>(n));
  return num_threads();
}

namespace detail {
int omp_threads_for(int64_t work_items, int64_t grain) {
  int64_t by_work = grain > 0 ? work_items / grain : work_items;
  int t = num_threads();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(t, by_work)));
}
bool in_parallel_region() { return omp_in_parallel(); }
}  // namespace detail

}  // namespace tessera
