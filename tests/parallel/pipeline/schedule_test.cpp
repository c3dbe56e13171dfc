// The GPipe and 1F1B schedules: every micro-batch runs forward then backward once, in order, and 1F1B
// holds at most P - s micro-batches' activations on stage s.
#include <gtest/gtest.h>

#include "tessera/parallel/pipeline/schedule.h"
#include "testing/expect.h"

namespace tessera::parallel::pipeline {
namespace {

using K = Action::Kind;

class PipelineSchedules : public ::testing::TestWithParam<std::tuple<int, int64_t, ScheduleKind>> {};

TEST_P(PipelineSchedules, EveryMicrobatchRunsForwardThenBackwardOnce) {
  auto [stages, m, kind] = GetParam();
  for (int s = 0; s < stages; ++s) {
    auto actions = make_schedule(kind, s, stages, m);
    ASSERT_EQ(actions.size(), static_cast<size_t>(2 * m));
    std::vector<int> forward_at(m, -1), backward_at(m, -1);
    int64_t next_forward = 0, next_backward = 0;
    for (size_t i = 0; i < actions.size(); ++i) {
      const auto& a = actions[i];
      // Micro-batches enter and leave in order, so neighbouring stages' sends and receives pair up.
      if (a.kind == K::Forward) EXPECT_EQ(a.microbatch, next_forward++);
      else EXPECT_EQ(a.microbatch, next_backward++);
      (a.kind == K::Forward ? forward_at : backward_at)[a.microbatch] = static_cast<int>(i);
    }
    for (int64_t j = 0; j < m; ++j) EXPECT_LT(forward_at[j], backward_at[j]);
    const int64_t peak = peak_in_flight(actions);
    if (kind == ScheduleKind::GPipe) EXPECT_EQ(peak, m);
    else EXPECT_EQ(peak, std::min<int64_t>(stages - s, m)) << "stage " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, PipelineSchedules,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 2, 4, 8),
                                            ::testing::Values(ScheduleKind::GPipe, ScheduleKind::OneForwardOneBackward)));

TEST(PipelineSchedule, OneFOneBOnTwoStagesInterleaves) {
  // Stage 0 of 2 with 4 micro-batches: one warm-up forward, then F B pairs, then the last backward.
  auto a = make_schedule(ScheduleKind::OneForwardOneBackward, 0, 2, 4);
  std::vector<Action> want{{K::Forward, 0}, {K::Forward, 1}, {K::Backward, 0}, {K::Forward, 2}, {K::Backward, 1},
                           {K::Forward, 3}, {K::Backward, 2}, {K::Backward, 3}};
  EXPECT_EQ(a, want);
}

TEST(PipelineSchedule, TheoreticalBubble) {
  EXPECT_DOUBLE_EQ(theoretical_bubble(2, 1), 0.5);
  EXPECT_DOUBLE_EQ(theoretical_bubble(2, 4), 0.2);
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 16), 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble(1, 8), 0.0);
}

TEST(PipelineSchedule, BadArgumentsAreRejected) {
  testing::expect_error<ValueError>([] { make_schedule(ScheduleKind::GPipe, 2, 2, 4); }, {"stage 2 of 2"});
  testing::expect_error<ValueError>([] { make_schedule(ScheduleKind::GPipe, 0, 2, 0); }, {"micro-batch"});
  testing::expect_error<ValueError>([] { parse_schedule("zigzag"); }, {"zigzag", "gpipe", "1f1b"});
}

}  // namespace
}  // namespace tessera::parallel::pipeline
