// Pipeline schedules: the order in which one stage runs the forward (F) and backward (B) passes of
// the step's M micro-batches.
//
//   GPipe (Huang et al. 2019): all M forwards, then all M backwards. Simple, but a stage holds the
//   activations of all M micro-batches at once.
//   1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s of P runs min(P-s-1, M) warm-up forwards,
//   then alternates one forward and one backward, then drains the remaining backwards. The same
//   bubble as GPipe, (P-1)/(M+P-1) of the step, but at most P-s micro-batches' activations are held.
// Both end with every gradient accumulated (a synchronous flush), so the optimizer step after them
// equals one step on the whole batch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::parallel::pipeline {

enum class ScheduleKind { GPipe, OneForwardOneBackward };

ScheduleKind parse_schedule(const std::string& name);  // "gpipe" | "1f1b"
const char* schedule_name(ScheduleKind kind);

struct Action {
  enum class Kind { Forward, Backward } kind;
  int64_t microbatch;
  bool operator==(const Action&) const = default;
};

// The actions of `stage` (0-based) of `stages` for `microbatches` micro-batches.
std::vector<Action> make_schedule(ScheduleKind kind, int stage, int stages, int64_t microbatches);

// The most micro-batches whose forward has run and whose backward has not, at any point of `actions`
// (the activations the stage holds at its peak).
int64_t peak_in_flight(const std::vector<Action>& actions);

// The idle fraction of a synchronous pipeline with equal stages: (P-1)/(M+P-1).
double theoretical_bubble(int stages, int64_t microbatches);

}  // namespace tessera::parallel::pipeline
