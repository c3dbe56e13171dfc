// ProcessGroup keeps each rank's arrival time at its latest collectives (the elastic agent's
// straggler report reads them from the heartbeat).
#include <gtest/gtest.h>

#include "parallel/threaded_group.h"
#include "tessera/ops/ops.h"

namespace tessera::dist {
namespace {

TEST(ProcessGroupArrivals, TheLatestCollectivesAreKeptInOrder) {
  const size_t issued = ProcessGroup::kArrivalsKept + 5;
  testing::run_on_threads(2, testing::threaded(2), [&](ProcessGroup& group) {
    EXPECT_TRUE(group.recent_arrivals().empty());
    for (size_t i = 0; i < issued; ++i) {
      Tensor t = ones({4});
      group.allreduce(t)->wait();
    }
    auto a = group.recent_arrivals();
    ASSERT_EQ(a.size(), ProcessGroup::kArrivalsKept);
    EXPECT_EQ(a.front().first, issued - ProcessGroup::kArrivalsKept);
    EXPECT_EQ(a.back().first, issued - 1);
    for (size_t i = 1; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, a[i - 1].first + 1);
      EXPECT_GE(a[i].second, a[i - 1].second);
    }
    EXPECT_GT(a.back().second, 1'600'000'000'000'000) << "Unix microseconds";
  });
}

}  // namespace
}  // namespace tessera::dist
