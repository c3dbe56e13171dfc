// The preflight's verdicts on measured links (dist/preflight.h): which link it names and why. The
// measuring itself runs between real test hosts in tests/cluster/multi_host_test.cpp.
#include <gtest/gtest.h>

#include "tessera/dist/preflight.h"

namespace tessera::dist {
namespace {

LinkMeasure link(int a, int b, double median_us, double quickest_us, double gbytes_per_s) {
  LinkMeasure l{a, b, "host" + std::to_string(a + 1), "host" + std::to_string(b + 1)};
  l.round_trip_us = median_us, l.min_round_trip_us = quickest_us, l.gbytes_per_s = gbytes_per_s;
  return l;
}

TEST(PreflightVerdict, NamesTheLinksOfAShapedHostByBandwidth) {
  // Host 3 behind a 100 Mbit/s token bucket: its small messages pass in the bucket's burst.
  const auto slow = slow_links({link(0, 1, 140, 110, 1.5), link(0, 2, 120, 100, 0.014), link(1, 2, 130, 105, 0.015)});
  ASSERT_EQ(slow.size(), 2u);
  EXPECT_NE(slow[0].find("slow link: host1 (rank 0) <-> host3 (rank 2) carries 0.014 GB/s"), std::string::npos) << slow[0];
  EXPECT_NE(slow[1].find("host2 (rank 1) <-> host3 (rank 2)"), std::string::npos) << slow[1];
}

TEST(PreflightVerdict, SchedulingNoiseInTheMedianNamesNothing) {
  // On a busy machine one link's median tripled, but its quickest trip shows the link is fine.
  EXPECT_TRUE(slow_links({link(0, 1, 420, 115, 1.4), link(0, 2, 120, 100, 1.5), link(1, 2, 130, 105, 1.3)}).empty());
}

TEST(PreflightVerdict, SmallLatencyDifferencesAreNoReasonToStop) {
  // 2.5x the best link, but only 60 us more: under min_round_trip_gap_us.
  EXPECT_TRUE(slow_links({link(0, 1, 45, 40, 1.4), link(0, 2, 110, 100, 1.5)}).empty());
}

TEST(PreflightVerdict, NamesALinkThatIsSlowOnEveryTrip) {
  const auto slow = slow_links({link(0, 1, 2600, 2400, 1.2), link(0, 2, 120, 100, 1.5), link(1, 2, 2550, 2450, 1.1)});
  ASSERT_EQ(slow.size(), 2u);
  EXPECT_NE(slow[0].find("host1 (rank 0) <-> host2 (rank 1) takes at least 2400 us per 4 KiB round trip, 24.0x the best link's 100 us"),
            std::string::npos)
      << slow[0];
  EXPECT_NE(slow[1].find("host2 (rank 1) <-> host3 (rank 2)"), std::string::npos) << slow[1];
}

TEST(PreflightVerdict, OneLinkHasNothingToCompareWith) {
  EXPECT_TRUE(slow_links({link(0, 1, 5000, 4000, 0.001)}).empty());
}

TEST(PreflightVerdict, TheTableShowsQuickestAndMedianTrips) {
  PreflightReport report;
  report.links = {link(0, 1, 140, 110, 1.5)};
  const std::string table = report.table();
  EXPECT_NE(table.find("4 KiB rtt us min/median"), std::string::npos) << table;
  EXPECT_NE(table.find("110.0 /      140.0"), std::string::npos) << table;
  EXPECT_NE(table.find("no link is more than 2x slower"), std::string::npos) << table;
}

}  // namespace
}  // namespace tessera::dist
