// Pipeline schedules: the order in which one stage runs the forward (F) and backward passes of the
// step's M micro-batches. P stages; in the bubble formulas every pass of a micro-batch through a
// whole stage takes the same time.
//
//   GPipe (Huang et al. 2019): all M forwards, then all M backwards. Simple, but a stage holds the
//   activations of all M micro-batches at once. Idle fraction of the step (P-1)/(M+P-1).
//   1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s of P runs min(P-s-1, M) warm-up forwards,
//   then alternates one forward and one backward, then drains the remaining backwards. The same
//   bubble as GPipe, but at most P-s micro-batches' activations are held.
//   Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): the model is cut into P·v chunks and
//   stage s holds v of them, chunks s, P+s, 2P+s, ...; a micro-batch travels round the ring of
//   stages v times. Filling and draining the pipeline then takes chunk-sized passes, so the bubble
//   shrinks v-fold: (P-1)/(v·M+P-1) of the step (its idle time is (P-1)/(v·M) of the compute), for
//   v times the messages. Megatron's order: M must be a multiple of P.
//   ZB-H1 (zero bubble, Qi et al. 2023): each backward is split into B, the input gradient the
//   previous stage waits for, and W, the weight gradients nobody waits for
//   (autograd/weight_grad_deferral.h). W passes fill the time 1F1B spends waiting, so with equal
//   F, B and W the idle time falls from (P-1)·3 to (P-1)·1 pass: (P-1)/(3M+P-1) of the step
//   ((P-1)/(3M) of the compute). Whole activations held stay 1F1B's P-s; besides them up to P-1
//   more micro-batches may wait for W, holding only their linear layers' inputs and output
//   gradients (2P-s-1 micro-batches with something held in all). Real passes are not equal (W is
//   shorter than B), so after its first steps a stage plans again from the passes all stages
//   measured (PipelineStage), and then up to P micro-batches may wait for W (2P-s in all).
//   ZB-V (Qi et al. 2023, section 6): ZB-H1's B/W split on a model cut into 2P chunks laid out in a
//   V: stage s holds chunks s and 2P-1-s, so a micro-batch goes down the stages and back up, the
//   last stage runs the two middle chunks back to back (no message between them), and the first
//   stage holds both ends (the input and the loss). Filling the pipeline then costs chunk-sized
//   passes, half ZB-H1's, and the W passes fill the rest: with equal F, B and W the idle time is
//   (P-1) chunk passes of 6M, (P-1)/(6M+P-1) of the step. Each stage holds at most 2P chunks'
//   activations, P stages' worth: 1F1B's peak (on its stage 0), on every stage.
// All end with every gradient accumulated (a synchronous flush), so the optimizer step after them
// equals one step on the whole batch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::parallel::pipeline {

enum class ScheduleKind { GPipe, OneForwardOneBackward, Interleaved, ZeroBubbleH1, ZeroBubbleV };

// "gpipe" | "1f1b" | "interleaved" | "zb-h1" | "zb-v"
ScheduleKind parse_schedule(const std::string& name);
const char* schedule_name(ScheduleKind kind);
// Whether the schedule splits each backward into B and W (ZB-H1, ZB-V).
bool splits_backward(ScheduleKind kind);

// Where a stage's chunks sit in the model cut into P·v runs (virtual stages). Looped (every schedule
// but ZB-V): chunk c of stage s is virtual stage c·P + s, a micro-batch goes round the ring v times.
// V (ZB-V, v = 2): chunk 0 of stage s is s and chunk 1 is 2P-1-s.
enum class ChunkOrder { Looped, V };
ChunkOrder chunk_order(ScheduleKind kind);
// Model chunks per stage: 2 for ZB-V, `virtual_stages` for interleaved, 1 for the others.
int chunks_per_stage(ScheduleKind kind, int virtual_stages);
int virtual_stage(ChunkOrder order, int stage, int stages, int chunk);
struct ChunkPlace {
  int stage, chunk;
};
// The stage and chunk that run virtual stage `virtual_stage` (0 ≤ it < stages · chunks).
ChunkPlace place_of(ChunkOrder order, int virtual_stage, int stages, int chunks);
// The stage that holds the model's last chunk, computes the loss and has the output: P-1, or 0 for ZB-V.
int output_stage(ScheduleKind kind, int stages);

struct Action {
  // Backward: the whole backward, except under ZB-H1, where it is B (input gradients) and Weight is W.
  enum class Kind { Forward, Backward, Weight } kind;
  int64_t microbatch;
  int chunk = 0;  // which of the stage's model chunks (its virtual stage: virtual_stage())
  bool operator==(const Action&) const = default;
};

// How long one pass of a micro-batch through one of a stage's model chunks takes, by kind: forward,
// backward (B under ZB-H1 and ZB-V; the whole backward under the others) and W (ZB-H1 and ZB-V only).
struct PassTimes {
  double forward = 1, backward = 1, weight = 0;
};

// The actions of `stage` (0-based) of `stages` for `microbatches` micro-batches; `chunks` is
// chunks_per_stage(): v for the interleaved schedule (at least 2), 2 for ZB-V, 1 for the others.
// ZB-H1 and ZB-V plan with every pass one unit long unless `pass_times` gives each stage's measured
// passes (one entry per stage, the same on every stage): then their list scheduling follows those
// times and lets one more micro-batch wait for W (schedule.cpp says why). Every order gives the
// same gradients bit for bit.
std::vector<Action> make_schedule(ScheduleKind kind, int stage, int stages, int64_t microbatches, int chunks = 1,
                                  const std::vector<PassTimes>& pass_times = {});

// The most (chunk, micro-batch) pairs whose forward has run and whose backward (B) has not, at any
// point of `actions`: the activations the stage holds at its peak.
int64_t peak_in_flight(const std::vector<Action>& actions);

// The idle fraction of a synchronous pipeline with equal stages: (P-1)/(M+P-1) for GPipe and 1F1B,
// (P-1)/(v·M+P-1) interleaved, (P-1)/(3M+P-1) for ZB-H1 and (P-1)/(6M+P-1) for ZB-V (when M >= P;
// below, that of their list-scheduled orders).
double theoretical_bubble(ScheduleKind kind, int stages, int64_t microbatches, int chunks = 1);
double theoretical_bubble(int stages, int64_t microbatches);  // GPipe and 1F1B

// The idle fraction of the step the schedule would have with these pass times (one entry per
// stage) and messages that cost nothing: every stage runs its make_schedule() order (ZB-H1's
// planned from these times, as a stage runs once it has measured them), a forward waits for the
// previous virtual stage's forward of its micro-batch, a backward for the next one's backward;
// idle = 1 - busy / step per stage (the step ends with the last stage to finish; steps run back to
// back, so that is each stage's measured wall time), averaged over the stages. With equal passes it
// is theoretical_bubble(); with measured ones it separates what the passes' unequal lengths cost
// from what the messages and the runtime cost (`tessera bench model-parallel`).
double simulated_bubble(ScheduleKind kind, int64_t microbatches, int chunks, const std::vector<PassTimes>& stages);
// The same for given orders, one per stage (make_schedule's), e.g. ZB-H1's unit-time order run at
// measured speeds. ValueError when an order names a micro-batch or chunk out of range, or when the
// orders wait on each other for ever (naming the stage and the action it waits at). `order` says
// which virtual stage each chunk is.
double simulated_bubble(const std::vector<std::vector<Action>>& orders, int64_t microbatches, int chunks,
                        const std::vector<PassTimes>& stages, ChunkOrder order = ChunkOrder::Looped);

}  // namespace tessera::parallel::pipeline
