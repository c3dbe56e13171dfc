#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>

#include "tessera/util/thread_pool.h"
#include "testing/expect.h"

using namespace tessera;

TEST(ThreadPool, ParallelForCoversTheRangeOnce) {
  set_num_threads(2);
  std::vector<std::atomic<int>> hits(100000);
  parallel_for(0, 100000, 1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  // Small ranges run inline on the caller.
  int calls = 0;
  parallel_for(0, 10, 1000, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPool, SizeFromEnvironmentAndValidation) {
  setenv("TESSERA_NUM_THREADS", "1", 1);
  EXPECT_EQ(init_threads_from_env(), 1);
  EXPECT_EQ(num_threads(), 1);
  setenv("TESSERA_NUM_THREADS", "two", 1);
  tessera::testing::expect_error<ValueError>([] { init_threads_from_env(); }, {"TESSERA_NUM_THREADS", "two"});
  unsetenv("TESSERA_NUM_THREADS");
  tessera::testing::expect_error<ValueError>([] { set_num_threads(0); }, {"set_num_threads"});
  set_num_threads(2);
}
