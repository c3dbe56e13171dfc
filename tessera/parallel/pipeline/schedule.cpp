#include "tessera/parallel/pipeline/schedule.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "tessera/core/error.h"

namespace tessera::parallel::pipeline {

namespace {

using K = Action::Kind;

std::vector<Action> gpipe(int64_t microbatches) {
  std::vector<Action> actions;
  for (int64_t m = 0; m < microbatches; ++m) actions.push_back({K::Forward, m});
  for (int64_t m = 0; m < microbatches; ++m) actions.push_back({K::Backward, m});
  return actions;
}

std::vector<Action> one_forward_one_backward(int stage, int stages, int64_t microbatches) {
  std::vector<Action> actions;
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

// Megatron-LM's interleaved order. The k-th forward of a stage is chunk (k mod P·v) / P of
// micro-batch (k / P·v)·P + k mod P: groups of P micro-batches go through chunk 0, then chunk 1, ...;
// backwards take the chunks in reverse. A stage warms up with 2(P-s-1) + (v-1)P forwards, then
// alternates, then drains.
std::vector<Action> interleaved(int stage, int stages, int64_t microbatches, int chunks) {
  const int64_t P = stages, v = chunks, total = microbatches * v;
  auto chunk_of = [&](int64_t k, bool forward) {
    const int c = static_cast<int>((k % (P * v)) / P);
    return forward ? c : static_cast<int>(v) - 1 - c;
  };
  auto microbatch_of = [&](int64_t k) { return (k / (P * v)) * P + k % P; };
  const int64_t warmup = std::min<int64_t>((P - stage - 1) * 2 + (v - 1) * P, total);
  std::vector<Action> actions;
  for (int64_t k = 0; k < warmup; ++k) actions.push_back({K::Forward, microbatch_of(k), chunk_of(k, true)});
  for (int64_t k = 0; k < total - warmup; ++k) {
    actions.push_back({K::Forward, microbatch_of(k + warmup), chunk_of(k + warmup, true)});
    actions.push_back({K::Backward, microbatch_of(k), chunk_of(k, false)});
  }
  for (int64_t k = total - warmup; k < total; ++k) actions.push_back({K::Backward, microbatch_of(k), chunk_of(k, false)});
  return actions;
}

// ZB-H1 by list scheduling over every stage at once, with F, B and W of one time unit each: at each
// unit a free stage runs a B whose gradient has arrived; else a forward whose input has arrived, if
// it holds fewer than P-s micro-batches' activations (1F1B's bound) and fewer than 2P-s-1
// micro-batches not yet through W (so at most P-1 more waiting for W); else its oldest waiting W.
// W passes thus fill the units 1F1B leaves idle. B passes and W passes run in micro-batch order,
// so counters describe each stage. Every stage computes the same simulation and keeps its own row,
// so the stages' orders agree.
struct ZeroBubblePlan {
  std::vector<Action> actions;  // of the stage asked for
  int64_t step_units = 0;       // the step's length in passes
};

ZeroBubblePlan zero_bubble_h1(int stage, int stages, int64_t microbatches) {
  const int P = stages;
  const int64_t M = microbatches;
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> forward_end(P, std::vector<int64_t>(M, kNever));
  std::vector<std::vector<int64_t>> backward_end(P, std::vector<int64_t>(M, kNever));
  std::vector<int64_t> forwards(P, 0), backwards(P, 0), weights(P, 0);
  ZeroBubblePlan plan;
  std::vector<Action>& mine = plan.actions;
  const int64_t limit = 3 * M * P + 4 * static_cast<int64_t>(P) + 16;  // far past any valid order's end
  auto unfinished = [&] { return std::any_of(weights.begin(), weights.end(), [&](int64_t w) { return w < M; }); };
  int64_t t = 0;
  for (; unfinished(); ++t) {
    TESSERA_ASSERT(t < limit, "ZB-H1 list scheduling made no progress (P=", P, ", M=", M, ")");
    struct Choice {
      K kind;
      int64_t m;
    };
    std::vector<std::optional<Choice>> chosen(P);
    for (int s = 0; s < P; ++s) {
      const int64_t b = backwards[s], f = forwards[s], w = weights[s];
      const bool backward_ready =
          b < f && forward_end[s][b] <= t && (s == P - 1 || backward_end[s + 1][b] <= t);
      const bool forward_ready = f < M && (s == 0 || forward_end[s - 1][f] <= t) && f - b < P - s &&
                                 f - w < (P - s) + (P - 1);
      const bool weight_ready = w < b && backward_end[s][w] <= t;
      if (backward_ready) chosen[s] = Choice{K::Backward, b};
      else if (forward_ready) chosen[s] = Choice{K::Forward, f};
      else if (weight_ready) chosen[s] = Choice{K::Weight, w};
    }
    for (int s = 0; s < P; ++s) {
      if (!chosen[s]) continue;
      const auto [kind, m] = *chosen[s];
      if (kind == K::Forward) forward_end[s][forwards[s]++] = t + 1;
      else if (kind == K::Backward) backward_end[s][backwards[s]++] = t + 1;
      else ++weights[s];
      if (s == stage) mine.push_back({kind, m});
    }
  }
  plan.step_units = t;
  return plan;
}

}  // namespace

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneForwardOneBackward;
  if (name == "interleaved") return ScheduleKind::Interleaved;
  if (name == "zb-h1") return ScheduleKind::ZeroBubbleH1;
  throw ValueError("[pipeline] unknown schedule '" + name + "' (expected gpipe, 1f1b, interleaved or zb-h1)");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneForwardOneBackward: return "1f1b";
    case ScheduleKind::Interleaved: return "interleaved";
    case ScheduleKind::ZeroBubbleH1: return "zb-h1";
  }
  return "?";
}

std::vector<Action> make_schedule(ScheduleKind kind, int stage, int stages, int64_t microbatches, int chunks) {
  TESSERA_CHECK(stages >= 1 && stage >= 0 && stage < stages, "[pipeline] stage ", stage, " of ", stages);
  TESSERA_CHECK(microbatches >= 1, "[pipeline] needs at least one micro-batch, got ", microbatches);
  if (kind == ScheduleKind::Interleaved) {
    TESSERA_CHECK(chunks >= 2, "[pipeline] the interleaved schedule needs at least 2 model chunks per stage "
                  "(parallel.virtual_stages), got ", chunks);
    TESSERA_CHECK(stages >= 2, "[pipeline] the interleaved schedule needs at least 2 stages, got ", stages);
    TESSERA_CHECK(microbatches % stages == 0, "[pipeline] the interleaved schedule runs micro-batches in groups of "
                  "the ", stages, " stages, so parallel.microbatches (", microbatches, ") must be a multiple of ", stages);
    return interleaved(stage, stages, microbatches, chunks);
  }
  TESSERA_CHECK(chunks == 1, "[pipeline] the ", schedule_name(kind), " schedule runs one model chunk per stage, got ",
                chunks, "; several chunks per stage need the interleaved schedule");
  switch (kind) {
    case ScheduleKind::GPipe: return gpipe(microbatches);
    case ScheduleKind::OneForwardOneBackward: return one_forward_one_backward(stage, stages, microbatches);
    case ScheduleKind::ZeroBubbleH1: return zero_bubble_h1(stage, stages, microbatches).actions;
    case ScheduleKind::Interleaved: break;
  }
  TESSERA_ASSERT(false, "unhandled schedule");
  return {};
}

int64_t peak_in_flight(const std::vector<Action>& actions) {
  int64_t held = 0, peak = 0;
  for (const auto& a : actions) {
    if (a.kind == Action::Kind::Forward) ++held;
    else if (a.kind == Action::Kind::Backward) --held;
    peak = std::max(peak, held);
  }
  return peak;
}

double theoretical_bubble(ScheduleKind kind, int stages, int64_t microbatches, int chunks) {
  const double idle = stages - 1;
  const double m = static_cast<double>(microbatches);
  switch (kind) {
    case ScheduleKind::Interleaved: return idle / (chunks * m + idle);
    case ScheduleKind::ZeroBubbleH1: {
      // (P-1)/(3M+P-1) once M >= P; with fewer micro-batches than stages the W passes cannot fill
      // the warm-up, so the list-scheduled step itself is the theory.
      if (microbatches >= stages) return idle / (3.0 * m + idle);
      return 1.0 - 3.0 * m / static_cast<double>(zero_bubble_h1(0, stages, microbatches).step_units);
    }
    default: return idle / (m + idle);
  }
}

double theoretical_bubble(int stages, int64_t microbatches) {
  return theoretical_bubble(ScheduleKind::OneForwardOneBackward, stages, microbatches);
}

double simulated_bubble(ScheduleKind kind, int64_t microbatches, int chunks, const std::vector<PassTimes>& stages) {
  const int P = static_cast<int>(stages.size());
  TESSERA_CHECK(P >= 1, "[pipeline] simulated_bubble needs at least one stage");
  const int64_t M = microbatches;
  const int V = P * chunks;  // virtual stages: chunk c of stage s is c·P + s
  constexpr double kPending = -1;
  std::vector<std::vector<double>> forward_end(V, std::vector<double>(M, kPending));
  std::vector<std::vector<double>> backward_end(V, std::vector<double>(M, kPending));
  std::vector<std::vector<Action>> orders;
  for (int s = 0; s < P; ++s) orders.push_back(make_schedule(kind, s, P, M, chunks));
  std::vector<size_t> next(P, 0);
  std::vector<double> clock(P, 0), busy(P, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      while (next[s] < orders[s].size()) {  // run this stage's actions as far as their inputs have arrived
        const Action& a = orders[s][next[s]];
        const int vs = a.chunk * P + s;
        const size_t m = static_cast<size_t>(a.microbatch);
        double ready = 0, length = 0;
        if (a.kind == Action::Kind::Forward) {
          ready = vs == 0 ? 0 : forward_end[vs - 1][m];
          length = stages[s].forward;
        } else if (a.kind == Action::Kind::Backward) {
          ready = vs == V - 1 ? forward_end[vs][m] : backward_end[vs + 1][m];
          length = stages[s].backward;
        } else {
          ready = backward_end[vs][m];
          length = stages[s].weight;
        }
        if (ready == kPending) break;
        const double end = std::max(clock[s], ready) + length;
        if (a.kind == Action::Kind::Forward) forward_end[vs][m] = end;
        else if (a.kind == Action::Kind::Backward) backward_end[vs][m] = end;
        clock[s] = end;
        busy[s] += length;
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < P; ++s)
    TESSERA_ASSERT(next[s] == orders[s].size(), "the ", schedule_name(kind), " schedule deadlocked in simulation at stage ", s);
  // Steps run back to back and the stages stay coupled, so every stage's step lasts as long as the
  // slowest stage's (the step's end), which is what each stage's wall time measures.
  const double step = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (int s = 0; s < P; ++s) idle += step > 0 ? 1.0 - busy[s] / step : 0.0;
  return idle / P;
}

}  // namespace tessera::parallel::pipeline
