#include "tessera/parallel/pipeline/schedule.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::parallel::pipeline {

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneForwardOneBackward;
  throw ValueError("[pipeline] unknown schedule '" + name + "' (expected gpipe or 1f1b)");
}

const char* schedule_name(ScheduleKind kind) { return kind == ScheduleKind::GPipe ? "gpipe" : "1f1b"; }

std::vector<Action> make_schedule(ScheduleKind kind, int stage, int stages, int64_t microbatches) {
  TESSERA_CHECK(stages >= 1 && stage >= 0 && stage < stages, "[pipeline] stage ", stage, " of ", stages);
  TESSERA_CHECK(microbatches >= 1, "[pipeline] needs at least one micro-batch, got ", microbatches);
  using K = Action::Kind;
  std::vector<Action> actions;
  if (kind == ScheduleKind::GPipe) {
    for (int64_t m = 0; m < microbatches; ++m) actions.push_back({K::Forward, m});
    for (int64_t m = 0; m < microbatches; ++m) actions.push_back({K::Backward, m});
    return actions;
  }
  const int64_t warmup = std::min<int64_t>(stages - stage - 1, microbatches);
  int64_t next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) actions.push_back({K::Forward, next_forward});
  while (next_forward < microbatches) {  // steady state: one forward, one backward
    actions.push_back({K::Forward, next_forward++});
    actions.push_back({K::Backward, next_backward++});
  }
  while (next_backward < microbatches) actions.push_back({K::Backward, next_backward++});
  return actions;
}

int64_t peak_in_flight(const std::vector<Action>& actions) {
  int64_t held = 0, peak = 0;
  for (const auto& a : actions) {
    held += a.kind == Action::Kind::Forward ? 1 : -1;
    peak = std::max(peak, held);
  }
  return peak;
}

double theoretical_bubble(int stages, int64_t microbatches) {
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

}  // namespace tessera::parallel::pipeline
