// The straggler rule (elastic/straggler_detector.h) on arrivals made up to the microsecond.
#include <gtest/gtest.h>

#include "tessera/elastic/straggler_detector.h"

namespace tessera::elastic {
namespace {

using Arrivals = std::vector<std::map<int64_t, int64_t>>;

// `collectives` collectives from `first`, 10 ms apart; rank `late` (-1: none) arrives `lag_us` after
// the others, who arrive together.
Arrivals window(int world, int64_t first, int collectives, int late, int64_t lag_us) {
  Arrivals a(static_cast<size_t>(world));
  for (int c = 0; c < collectives; ++c)
    for (int r = 0; r < world; ++r)
      a[static_cast<size_t>(r)][first + c] = (first + c) * 10000 + (r == late ? lag_us : 0);
  return a;
}

TEST(StragglerDetector, ARankLateThreeWindowsInARowIsNamedOnce) {
  StragglerDetector d(std::chrono::milliseconds(2000));
  EXPECT_FALSE(d.observe(window(3, 0, 20, 1, 15000)));  // 300 ms of the others' waiting: strike 1
  EXPECT_FALSE(d.observe(window(3, 20, 20, 1, 15000)));  // strike 2
  auto named = d.observe(window(3, 40, 20, 1, 15000));   // strike 3
  ASSERT_TRUE(named);
  EXPECT_EQ(named->rank, 1);
  EXPECT_NE(named->text.find("straggler: rank 1 is consistently late"), std::string::npos) << named->text;
  EXPECT_NE(named->text.find("over #40..#59 (20 that every rank reached)"), std::string::npos) << named->text;
  EXPECT_FALSE(d.observe(window(3, 60, 20, 1, 15000)));  // the same streak is not named again
}

TEST(StragglerDetector, ArrivalsAlreadyCountedAreNotCountedAgain) {
  StragglerDetector d(std::chrono::milliseconds(2000));
  Arrivals same = window(2, 0, 20, 1, 15000);
  EXPECT_FALSE(d.observe(same));
  EXPECT_FALSE(d.observe(same));  // nothing new: no strike
  EXPECT_FALSE(d.observe(window(2, 20, 20, 1, 15000)));
  EXPECT_TRUE(d.observe(window(2, 40, 20, 1, 15000)));
}

TEST(StragglerDetector, SmallLagsAndChangingLateRanksAreNotStragglers) {
  StragglerDetector d(std::chrono::milliseconds(2000));
  for (int w = 0; w < 6; ++w) EXPECT_FALSE(d.observe(window(3, w * 20, 20, 2, 100)));  // 2 ms: under 5% of the window
  for (int w = 6; w < 12; ++w) EXPECT_FALSE(d.observe(window(3, w * 20, 20, w % 3, 15000)));  // a different rank each time
  EXPECT_FALSE(d.observe(window(1, 240, 20, 0, 15000)));  // alone: nobody waits
}

TEST(StragglerDetector, AWindowWithoutTheLateRankClearsItsStrikes) {
  StragglerDetector d(std::chrono::milliseconds(2000));
  EXPECT_FALSE(d.observe(window(2, 0, 20, 1, 15000)));
  EXPECT_FALSE(d.observe(window(2, 20, 20, 1, 15000)));
  EXPECT_FALSE(d.observe(window(2, 40, 20, -1, 0)));  // on time
  EXPECT_FALSE(d.observe(window(2, 60, 20, 1, 15000)));
  EXPECT_FALSE(d.observe(window(2, 80, 20, 1, 15000)));
  EXPECT_TRUE(d.observe(window(2, 100, 20, 1, 15000)));
  d.reset();  // a new generation starts over
  EXPECT_FALSE(d.observe(window(2, 0, 20, 1, 15000)));
}

}  // namespace
}  // namespace tessera::elastic
