// The heartbeat contract (dist/heartbeat.h): what the watchdog writes, the agent reads back the same.
#include <gtest/gtest.h>

#include "tessera/dist/heartbeat.h"

namespace tessera::dist {
namespace {

void expect_same(const Heartbeat& a, const Heartbeat& b) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.busy_us, b.busy_us);
  EXPECT_EQ(a.in_flight, b.in_flight);
  EXPECT_EQ(a.sequence, b.sequence);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.call, b.call);
  EXPECT_EQ(a.arrivals, b.arrivals);
}

TEST(Heartbeat, InFlightBeatRoundTrips) {
  Heartbeat beat;
  beat.count = 42;
  beat.busy_us = 123456789;
  beat.in_flight = true;
  beat.sequence = 30;
  beat.op = "allreduce";
  beat.call = "allreduce #30 (sum, float32 x 203530)";
  beat.arrivals = {{28, 1764000000000001}, {29, 1764000000000500}, {30, 1764000000001000}};
  auto parsed = parse_heartbeat(format_heartbeat(beat));
  ASSERT_TRUE(parsed);
  expect_same(*parsed, beat);
}

TEST(Heartbeat, IdleBeatRoundTrips) {
  Heartbeat beat;
  beat.count = 1;
  beat.sequence = 7;  // the next collective
  auto parsed = parse_heartbeat(format_heartbeat(beat));
  ASSERT_TRUE(parsed);
  expect_same(*parsed, beat);
  EXPECT_EQ(parsed->op, "idle");
}

TEST(Heartbeat, InFlightWithoutTheCallNamesTheOpAndSequence) {
  auto parsed = parse_heartbeat("5 10 1 12 broadcast\n\n");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->call, "broadcast #12");
}

TEST(Heartbeat, WhatIsNotAHeartbeatIsRefused) {
  for (const char* text : {"", "\n\n", "garbage", "1 2 3", "1 2 7 4 allreduce\n\n", "1 2 0 4 idle\n\n5",
                           "1 2 0 4 idle\n\n5:x", "1 2 0 4 idle\n\nx:5", "1 2 0 4 idle\n\n5:6junk",
                           "1 2 0 4 idle\n\n99999999999999999999:1", "x 2 0 4 idle\n\n"})
    EXPECT_FALSE(parse_heartbeat(text)) << "accepted: '" << text << "'";
}

TEST(Heartbeat, KeysAreUnderTheFirstGroupsPrefix) {
  EXPECT_EQ(heartbeat_key(3), "heartbeat/3");
  EXPECT_EQ(worker_heartbeat_key(3), group_store_prefix(0) + "/heartbeat/3");
}

}  // namespace
}  // namespace tessera::dist
