#include "tessera/parallel/pipeline/schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <limits>

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

// ZB-H1 by list scheduling over every stage at once. Whenever a stage is free it runs a B whose
// gradient has arrived; else a forward whose input has arrived, if it holds fewer than P-s
// micro-batches' activations (1F1B's bound) and fewer than (P-s) + `weight_slots` micro-batches not
// yet through W; else its oldest waiting W. W passes thus fill the time 1F1B leaves idle. B passes
// and W passes run in micro-batch order, so counters describe each stage, and the gradients
// accumulate in the same order whatever the pass times: every order this makes gives the same bits.
// Every stage computes the same simulation from the same times and keeps its own row, so the
// stages' orders agree, and the simulation itself is a global order of the passes that respects
// every dependency, so the stages cannot deadlock when they run their rows at any real speeds.
//
// With unit passes (the plan before anything is measured) `weight_slots` is P-1. With measured times
// it is P: W is shorter than B on real layers (2.75 against 3.97 ms for the GPT's stages,
// `tessera bench model-parallel`), and a stage that may start one more forward while a W waits
// fills the gaps the shorter Ws leave. A Python model of this loop over the sixth session's measured
// passes (F/B/W 4.16/4.19/3.03 ms, P = 2, M = 16) put the unit order at 1.39x the theoretical bubble,
// the timed order with P-1 slots at 1.39x too, and with P slots at 1.10x. The extra micro-batch holds
// only its linear layers' inputs and output gradients, not its activations.
// The clock of ZB-H1's and ZB-V's list scheduling. At each event time every free stage starts what
// it may (`start_pass(s, took_no_time)`, which also says whether it started a pass that took no
// time: a W of 0, or one too short to move t; then every stage looks again at the same time). The
// next event is a stage becoming free: every pass's end is some stage's free time, so no message
// arrives between two of them. Each round is time 0 or the end of one of the passes, so `passes`
// (plus a margin) bounds the rounds. Returns the step's length.
template <typename StartPass, typename Unfinished>
double run_list_schedule(const char* schedule, int P, int64_t M, int64_t passes, std::vector<double>& free_at, double& t,
                         StartPass start_pass, Unfinished unfinished) {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  for (int64_t round = 0; unfinished(); ++round) {
    TESSERA_ASSERT(round < passes + 16, schedule, " list scheduling made no progress (P=", P, ", M=", M, ")");
    for (bool took_no_time = true; took_no_time;) {
      took_no_time = false;
      for (int s = 0; s < P; ++s)
        if (free_at[static_cast<size_t>(s)] <= t) start_pass(s, took_no_time);
    }
    double next = kNever;
    for (double f : free_at)
      if (f > t) next = std::min(next, f);
    if (next == kNever) break;  // nothing running: finished, or stuck (asserted below)
    t = next;
  }
  TESSERA_ASSERT(!unfinished(), schedule, " list scheduling is stuck (P=", P, ", M=", M, ")");
  return *std::max_element(free_at.begin(), free_at.end());
}

struct ZeroBubblePlan {
  std::vector<Action> actions;  // of the stage asked for
  double step_length = 0;       // the step's length (in passes when the passes take one unit)
};

ZeroBubblePlan zero_bubble_h1(int stage, int64_t microbatches, const std::vector<PassTimes>& times, int64_t weight_slots) {
  const int P = static_cast<int>(times.size());
  const int64_t M = microbatches;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> forward_end(P, std::vector<double>(M, kNever));
  std::vector<std::vector<double>> backward_end(P, std::vector<double>(M, kNever));
  std::vector<int64_t> forwards(P, 0), backwards(P, 0), weights(P, 0);
  std::vector<double> free_at(P, 0.0);
  ZeroBubblePlan plan;
  double t = 0;
  // Starts stage s's next pass at time t if one may start.
  auto start_pass = [&](int s, bool& took_no_time) -> void {
    const int64_t b = backwards[s], f = forwards[s], w = weights[s];
    // A free stage's own passes have all ended, so B's forward and W's B have.
    const bool backward_ready = b < f && (s == P - 1 || backward_end[s + 1][b] <= t);
    const bool forward_ready = f < M && (s == 0 || forward_end[s - 1][f] <= t) && f - b < P - s &&
                               f - w < (P - s) + weight_slots;
    Action action;
    double length = 0;
    if (backward_ready) {
      action = {K::Backward, b}, length = times[s].backward;
      backward_end[s][backwards[s]++] = t + length;
    } else if (forward_ready) {
      action = {K::Forward, f}, length = times[s].forward;
      forward_end[s][forwards[s]++] = t + length;
    } else if (w < b) {
      action = {K::Weight, w}, length = times[s].weight;
      ++weights[s];
    } else {
      return;
    }
    free_at[s] = t + length;
    took_no_time = took_no_time || free_at[s] <= t;  // a W of 0, or a pass too short to move t
    if (s == stage) plan.actions.push_back(action);
  };
  auto unfinished = [&] { return std::any_of(weights.begin(), weights.end(), [&](int64_t w) { return w < M; }); };
  plan.step_length = run_list_schedule("ZB-H1", P, M, 3 * M * P, free_at, t, start_pass, unfinished);
  return plan;
}

ZeroBubblePlan zero_bubble_h1_unit(int stage, int stages, int64_t microbatches) {
  return zero_bubble_h1(stage, microbatches, std::vector<PassTimes>(static_cast<size_t>(stages), PassTimes{1, 1, 1}),
                        stages - 1);
}

// ZB-V by list scheduling too, over the 2P virtual stages of the V (chunk 0 of stage s is virtual
// stage s, chunk 1 is 2P-1-s). Whenever a stage is free it runs a B whose gradient has arrived
// (chunk 1's first: its gradient goes on to chunk 0 of the same micro-batch); else a forward whose
// input has arrived, chunk 1's first (it carries a micro-batch towards its loss and its B), if the
// stage then holds at most 2P chunks' activations, with one place kept for chunk 1 (a stage full of
// chunk-0 activations could start no chunk-1 forward, and none of its B passes would ever come), at
// most 2P-s-1 micro-batches in chunk 0 (more only queue behind the later stages), and at most 2P +
// `weight_slots` micro-batch chunks not yet through W; else its oldest waiting W. Passes of each
// kind run in micro-batch order within each chunk, so the gradients' bits are 1F1B's, and the
// simulation is one global order of the passes, so the stages' rows cannot deadlock. A Python model
// of these rules over P = 2..8, M = 1..32 with unit passes met (P-1)/(6M+P-1) at every M >= P but
// M = P+1 for P >= 5 (up to 1.47x: the last stage, full, makes the last micro-batch wait), and
// found no deadlock over 3,000 draws of random pass times (W of 0 among them). With the GPT's
// measured passes (F/B/W 2.08/2.10/1.50 ms per chunk) it is 1.11x the theory at P = 2, M = 16.
ZeroBubblePlan zero_bubble_v(int stage, int64_t microbatches, const std::vector<PassTimes>& times, int64_t weight_slots) {
  const int P = static_cast<int>(times.size()), V = 2 * P;
  const int64_t M = microbatches, held_limit = 2 * P;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> forward_end(V, std::vector<double>(M, kNever));
  std::vector<std::vector<double>> backward_end(V, std::vector<double>(M, kNever));
  using PerChunk = std::array<int64_t, 2>;
  std::vector<PerChunk> forwards(P, {0, 0}), backwards(P, {0, 0}), weights(P, {0, 0});
  std::vector<std::deque<Action>> waiting_weights(P);  // B passes run, in order, waiting for their W
  std::vector<double> free_at(P, 0.0);
  ZeroBubblePlan plan;
  double t = 0;
  auto start_pass = [&](int s, bool& took_no_time) -> void {
    const int64_t held = forwards[s][0] - backwards[s][0] + forwards[s][1] - backwards[s][1];
    const int64_t unweighted = forwards[s][0] - weights[s][0] + forwards[s][1] - weights[s][1];
    Action action{K::Weight, -1};
    double length = 0;
    for (int c : {1, 0}) {  // a B whose gradient has arrived
      const int vs = virtual_stage(ChunkOrder::V, s, P, c);
      const int64_t b = backwards[s][c];
      if (b < forwards[s][c] && (vs == V - 1 ? forward_end[vs][b] : backward_end[vs + 1][b]) <= t) {
        action = {K::Backward, b, c}, length = times[s].backward;
        backward_end[vs][backwards[s][c]++] = t + length;
        waiting_weights[s].push_back({K::Weight, b, c});
        break;
      }
    }
    for (int c : {1, 0}) {  // else a forward whose input has arrived, within the bounds
      if (action.microbatch >= 0) break;
      const int vs = virtual_stage(ChunkOrder::V, s, P, c);
      const int64_t f = forwards[s][c];
      const bool within = held + 1 <= held_limit - (c == 0 ? 1 : 0) && unweighted + 1 <= held_limit + weight_slots &&
                          (c == 1 || f - backwards[s][0] < 2 * P - s - 1);
      if (f < M && (vs == 0 || forward_end[vs - 1][f] <= t) && within) {
        action = {K::Forward, f, c}, length = times[s].forward;
        forward_end[vs][forwards[s][c]++] = t + length;
      }
    }
    if (action.microbatch < 0) {  // else its oldest waiting W
      if (waiting_weights[s].empty()) return;
      action = waiting_weights[s].front(), length = times[s].weight;
      waiting_weights[s].pop_front();
      ++weights[s][static_cast<size_t>(action.chunk)];
    }
    free_at[s] = t + length;
    took_no_time = took_no_time || free_at[s] <= t;
    if (s == stage) plan.actions.push_back(action);
  };
  auto unfinished = [&] {
    return std::any_of(weights.begin(), weights.end(), [&](const PerChunk& w) { return w[0] < M || w[1] < M; });
  };
  plan.step_length = run_list_schedule("ZB-V", P, M, 6 * M * P, free_at, t, start_pass, unfinished);
  return plan;
}

ZeroBubblePlan zero_bubble_v_unit(int stage, int stages, int64_t microbatches) {
  return zero_bubble_v(stage, microbatches, std::vector<PassTimes>(static_cast<size_t>(stages), PassTimes{1, 1, 1}),
                       stages - 1);
}

void check_pass_times(const std::vector<PassTimes>& pass_times, int stages, ScheduleKind kind) {
  TESSERA_CHECK(pass_times.size() == static_cast<size_t>(stages), "[pipeline] ", schedule_name(kind), " plans from one "
                "set of pass times per stage: got ", pass_times.size(), " for ", stages, " stages");
  for (const PassTimes& t : pass_times)
    TESSERA_CHECK(std::isfinite(t.forward) && std::isfinite(t.backward) && std::isfinite(t.weight) && t.forward >= 0 &&
                      t.backward >= 0 && t.weight >= 0,
                  "[pipeline] ", schedule_name(kind), " plans from finite pass times of at least 0, got F ", t.forward,
                  " B ", t.backward, " W ", t.weight);
}

}  // namespace

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneForwardOneBackward;
  if (name == "interleaved") return ScheduleKind::Interleaved;
  if (name == "zb-h1") return ScheduleKind::ZeroBubbleH1;
  if (name == "zb-v") return ScheduleKind::ZeroBubbleV;
  throw ValueError("[pipeline] unknown schedule '" + name + "' (expected gpipe, 1f1b, interleaved, zb-h1 or zb-v)");
}

bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleH1 || kind == ScheduleKind::ZeroBubbleV;
}

ChunkOrder chunk_order(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleV ? ChunkOrder::V : ChunkOrder::Looped;
}

int chunks_per_stage(ScheduleKind kind, int virtual_stages) {
  if (kind == ScheduleKind::ZeroBubbleV) return 2;
  return kind == ScheduleKind::Interleaved ? virtual_stages : 1;
}

int virtual_stage(ChunkOrder order, int stage, int stages, int chunk) {
  if (order == ChunkOrder::V) return chunk == 0 ? stage : 2 * stages - 1 - stage;
  return chunk * stages + stage;
}

ChunkPlace place_of(ChunkOrder order, int virtual_stage, int stages, int chunks) {
  TESSERA_CHECK(virtual_stage >= 0 && virtual_stage < stages * chunks, "[pipeline] virtual stage ", virtual_stage,
                " of ", stages * chunks);
  if (order == ChunkOrder::V) {
    if (virtual_stage < stages) return {virtual_stage, 0};
    return {2 * stages - 1 - virtual_stage, 1};
  }
  return {virtual_stage % stages, virtual_stage / stages};
}

int output_stage(ScheduleKind kind, int stages) { return kind == ScheduleKind::ZeroBubbleV ? 0 : stages - 1; }

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneForwardOneBackward: return "1f1b";
    case ScheduleKind::Interleaved: return "interleaved";
    case ScheduleKind::ZeroBubbleH1: return "zb-h1";
    case ScheduleKind::ZeroBubbleV: return "zb-v";
  }
  return "?";
}

std::vector<Action> make_schedule(ScheduleKind kind, int stage, int stages, int64_t microbatches, int chunks,
                                  const std::vector<PassTimes>& pass_times) {
  TESSERA_CHECK(stages >= 1 && stage >= 0 && stage < stages, "[pipeline] stage ", stage, " of ", stages);
  TESSERA_CHECK(microbatches >= 1, "[pipeline] needs at least one micro-batch, got ", microbatches);
  TESSERA_CHECK(pass_times.empty() || splits_backward(kind), "[pipeline] only ZB-H1 and ZB-V plan from pass times; "
                "the ", schedule_name(kind), " schedule's order does not depend on them");
  if (kind == ScheduleKind::Interleaved) {
    TESSERA_CHECK(chunks >= 2, "[pipeline] the interleaved schedule needs at least 2 model chunks per stage "
                  "(parallel.virtual_stages), got ", chunks);
    TESSERA_CHECK(stages >= 2, "[pipeline] the interleaved schedule needs at least 2 stages, got ", stages);
    TESSERA_CHECK(microbatches % stages == 0, "[pipeline] the interleaved schedule runs micro-batches in groups of "
                  "the ", stages, " stages, so parallel.microbatches (", microbatches, ") must be a multiple of ", stages);
    return interleaved(stage, stages, microbatches, chunks);
  }
  if (kind == ScheduleKind::ZeroBubbleV) {
    TESSERA_CHECK(chunks == 2, "[pipeline] the zb-v schedule runs 2 model chunks per stage (a V), got ", chunks);
    TESSERA_CHECK(stages >= 2, "[pipeline] the zb-v schedule needs at least 2 stages, got ", stages);
    if (pass_times.empty()) return zero_bubble_v_unit(stage, stages, microbatches).actions;
    check_pass_times(pass_times, stages, kind);
    return zero_bubble_v(stage, microbatches, pass_times, stages).actions;
  }
  TESSERA_CHECK(chunks == 1, "[pipeline] the ", schedule_name(kind), " schedule runs one model chunk per stage, got ",
                chunks, "; several chunks per stage need the interleaved or zb-v schedule");
  switch (kind) {
    case ScheduleKind::GPipe: return gpipe(microbatches);
    case ScheduleKind::OneForwardOneBackward: return one_forward_one_backward(stage, stages, microbatches);
    case ScheduleKind::ZeroBubbleH1:
      if (pass_times.empty()) return zero_bubble_h1_unit(stage, stages, microbatches).actions;
      check_pass_times(pass_times, stages, kind);
      return zero_bubble_h1(stage, microbatches, pass_times, stages).actions;
    case ScheduleKind::Interleaved:
    case ScheduleKind::ZeroBubbleV: break;
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
      return 1.0 - 3.0 * m / zero_bubble_h1_unit(0, stages, microbatches).step_length;
    }
    case ScheduleKind::ZeroBubbleV:  // in chunk passes: P-1 idle of 6M (2 chunks × F, B, W)
      if (microbatches >= stages) return idle / (6.0 * m + idle);
      return 1.0 - 6.0 * m / zero_bubble_v_unit(0, stages, microbatches).step_length;
    default: return idle / (m + idle);
  }
}

double theoretical_bubble(int stages, int64_t microbatches) {
  return theoretical_bubble(ScheduleKind::OneForwardOneBackward, stages, microbatches);
}

double simulated_bubble(ScheduleKind kind, int64_t microbatches, int chunks, const std::vector<PassTimes>& stages) {
  TESSERA_CHECK(!stages.empty(), "[pipeline] simulated_bubble needs at least one stage");
  const int P = static_cast<int>(stages.size());
  // ZB-H1 and ZB-V run the order planned from these times, as a stage does once it has measured them.
  const std::vector<PassTimes> plan_from = splits_backward(kind) ? stages : std::vector<PassTimes>{};
  std::vector<std::vector<Action>> orders;
  for (int s = 0; s < P; ++s) orders.push_back(make_schedule(kind, s, P, microbatches, chunks, plan_from));
  return simulated_bubble(orders, microbatches, chunks, stages, chunk_order(kind));
}

double simulated_bubble(const std::vector<std::vector<Action>>& orders, int64_t microbatches, int chunks,
                        const std::vector<PassTimes>& stages, ChunkOrder order) {
  const int P = static_cast<int>(stages.size());
  TESSERA_CHECK(P >= 1 && orders.size() == stages.size(), "[pipeline] simulated_bubble needs one order and one set of "
                "pass times per stage, got ", orders.size(), " and ", stages.size());
  const int64_t M = microbatches;
  const int V = P * chunks;  // virtual stages
  constexpr double kPending = -1;
  std::vector<std::vector<double>> forward_end(V, std::vector<double>(M, kPending));
  std::vector<std::vector<double>> backward_end(V, std::vector<double>(M, kPending));
  std::vector<size_t> next(P, 0);
  std::vector<double> clock(P, 0), busy(P, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      while (next[s] < orders[s].size()) {  // run this stage's actions as far as their inputs have arrived
        const Action& a = orders[s][next[s]];
        TESSERA_CHECK(a.microbatch >= 0 && a.microbatch < M && a.chunk >= 0 && a.chunk < chunks, "[pipeline] stage ", s,
                      "'s order names micro-batch ", a.microbatch, " chunk ", a.chunk, " of ", M, " and ", chunks);
        const int vs = virtual_stage(order, s, P, a.chunk);
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
  // Given orders can wait on each other (a stage's B before the next stage has run it, say).
  for (int s = 0; s < P; ++s) {
    if (next[s] == orders[s].size()) continue;
    const Action& a = orders[s][next[s]];
    throw ValueError(tessera::detail::concat("[pipeline] the orders deadlock: stage ", s, " waits forever at its action ", next[s], " (",
                            a.kind == Action::Kind::Forward ? "forward" : a.kind == Action::Kind::Backward ? "backward" : "W",
                            " of micro-batch ", a.microbatch, " chunk ", a.chunk, ")"));
  }
  // Steps run back to back and the stages stay coupled, so every stage's step lasts as long as the
  // slowest stage's (the step's end), which is what each stage's wall time measures.
  const double step = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (int s = 0; s < P; ++s) idle += step > 0 ? 1.0 - busy[s] / step : 0.0;
  return idle / P;
}

}  // namespace tessera::parallel::pipeline
