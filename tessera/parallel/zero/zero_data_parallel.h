// ZeroDataParallel: sharded data parallelism — DeepSpeed's ZeRO stages (Rajbhandari et al. 2019) and
// PyTorch's FSDP. Every rank trains a replica on its share of the batch, as with DDP, but the training
// state is cut into world-size pieces instead of replicated:
//
//   stage 1  the optimizer state: each rank's optimizer updates only its piece of every parameter;
//            after backward the gradients are reduce-scattered (each rank receives the average of
//            its piece), and after the step the updated pieces are all-gathered into the parameters;
//   stage 2  and the gradients: each unit's gradients are reduce-scattered during backward as soon as
//            they are all ready (overlapped, like DDP's buckets) and the whole gradients dropped;
//   stage 3  and the parameters: a unit (a layer of the model's chain, or several by size) is
//            all-gathered just before its forward and freed after it, gathered again just before its
//            backward (the next unit's gather prefetched while this one computes), and freed once its
//            gradients are reduce-scattered. Between steps a rank holds only its pieces.
//
// Per rank with Ψ parameters and Adam (fp32): stage 1 holds 4Ψ + 4Ψ + 8Ψ/N bytes of parameters,
// gradients and state at its peak, stage 2 4Ψ + 4Ψ/N + 8Ψ/N (plus a unit's gradients in flight),
// stage 3 16Ψ/N (plus the units gathered at once). The layout is flat_unit.h's.
//
// Hybrid sharding (ZeroOptions::replicas): the stages inside each replica's group, the replicas kept
// equal by an all-reduce of each reduced gradient piece across them (HSDP; hybrid_groups.h makes the
// groups).
//
// A stage is two policies, not branches: where the whole parameters are kept between uses
// (parameter_layout.h: ReplicatedParameters for stages 1 and 2, ShardedParameters for stage 3; a
// hybrid-sharded or offloaded layout is one more), and whether gradients are reduce-scattered as
// each unit's are ready (stages 2, 3) or at the end of backward (stage 1). The run (units, gradients,
// the step) is zero_data_parallel.cpp; the whole model's and optimizer's state, zero_whole_state.cpp.
//
// Use (the optimizer is built over the pieces, and stepped through step()):
//   ZeroDataParallel zero(model, group, {.stage = 3});
//   optim::Adam opt(zero.parameters(), {...});
//   zero.attach(opt);                       // LARS and LAMB: norms over whole tensors
//   Tensor loss = cross_entropy(zero(x), y);
//   loss.backward();                        // returns with this rank's averaged gradient pieces
//   zero.step(opt);                         // updates, gathers, zeroes the gradients
// Gradients accumulate over several backward passes until step() (scale each loss by 1/passes).
// Every parameter must receive a gradient in each backward pass; one that does not is an error
// naming it, and frozen parameters (requires_grad false) are refused. At stage 3 the model's own
// parameters hold no memory between uses: read them through full_state_dict(), not directly.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/zero/flat_unit.h"

namespace tessera::parallel::zero {

struct ZeroOptions {
  int stage = 2;  // 1, 2 or 3
  // Stages 1 and 2: parameters grouped, in reverse order (the order their gradients become ready),
  // into units of at most this many bytes, as DDP's buckets.
  size_t bucket_cap_bytes = 25u << 20;
  // Stage 3, for a model that is a chain of layers (Sequential, the transformer): "layer" makes each
  // layer with parameters a unit; "size" merges consecutive layers until a unit holds min_unit_bytes.
  // Any other model is one unit.
  std::string wrap_policy = "layer";
  size_t min_unit_bytes = 1u << 20;
  bool prefetch = true;  // stage 3: the next unit's all-gather runs while this one computes
  // The type gradients are reduce-scattered in: float32, or bfloat16 (mixed precision: half the
  // bytes). The backends sum bf16 in float32 (the shared-memory backend rounds once, at the end; a
  // ring rounds each hop's partial sum), and this rank's piece is added to its float32 gradient.
  DType reduce_dtype = DType::Float32;
  // Every rank starts from rank 0's values (a broadcast at construction); false where the caller
  // loads the state next (live membership's rebuild, train/trainer_live.cpp).
  bool broadcast_initial_state = true;
  // Hybrid sharding (HSDP, PyTorch's HYBRID_SHARD): the group is one replica's ranks (a host's), the
  // state is cut into group-size pieces, and `replicas` are the ranks holding this rank's pieces in
  // the other replicas (one per host): each gradient piece reduce-scattered inside the group is then
  // all-reduced over them, so only a piece (1/group of the gradients) crosses between hosts, and the
  // parameters' gathers stay inside a host. Null: the group is the whole job (plain ZeRO).
  dist::ProcessGroupPtr replicas;
};

// One rank's pieces of the training state, flat, as live membership keeps and moves them
// (shard_buddies.h; stages 1 and 2): per unit the rank's chunk of the parameters, then the header
// below as five int64 words (step, optimizer steps, lr's bits, buffer count, value count), then per
// model parameter and optimizer buffer (names sorted) the rank's piece of the buffer. float32. The
// header sits before the buffers so that they travel as one message (shard_buddies.cpp).
struct PackedPieces {
  int64_t step = -1;                 // the trainer's step these values are the state after
  int64_t optimizer_steps = 0;       // Optimizer::step_count() then
  double lr = 0.0;                   // Optimizer::lr() then
  std::vector<std::string> buffers;  // the optimizer's buffer names, sorted
  Tensor values;
};

// The bytes of training state this rank holds now.
struct ZeroMemory {
  int64_t parameters = 0;       // whole parameters kept (stages 1, 2) or gathered now, plus pieces (3)
  int64_t gradients = 0;        // gradient pieces, plus whole gradients while a backward is running
  int64_t optimizer_state = 0;  // the optimizer's buffers (its pieces)
  int64_t total() const { return parameters + gradients + optimizer_state; }
};

class ZeroDataParallel {
 public:
  // Broadcasts rank 0's parameters (every rank starts from them) and cuts them into pieces. Collective.
  ZeroDataParallel(std::shared_ptr<nn::Module> model, dist::ProcessGroupPtr group, ZeroOptions options = {});
  ~ZeroDataParallel();
  ZeroDataParallel(const ZeroDataParallel&) = delete;
  ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

  // The model's forward (stage 3 gathers each unit around its layers). Collective at stage 3.
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // What this rank's optimizer updates: one 1-D piece per model parameter, in the model's order
  // (possibly empty), whose .grad holds this rank's piece of the averaged gradient after backward.
  const std::vector<Tensor>& parameters() const;
  // Gives LARS and LAMB the whole tensors' norms (Optimizer::Partition). Call once after building it.
  void attach(optim::Optimizer& optimizer);
  // optimizer.step(), the updated parameters gathered where the stage keeps them whole, and the
  // gradient pieces zeroed. Collective.
  void step(optim::Optimizer& optimizer);
  // Scales the gradient pieces so that the global norm is at most max_norm; returns the norm before.
  // Collective.
  double clip_grad_norm(double max_norm);
  // Drops the gradients accumulated since the last step.
  void zero_grad();
  // Multiplies this rank's gradient pieces by inv_scale (fp16 loss scaling, optim/grad_scaler.h);
  // true if any holds an inf or NaN. Not collective.
  bool unscale_gradients(double inv_scale);
  // Stage 3: keeps every unit gathered until hold_gathered(false), so that forwards issue no
  // collectives (evaluation, where ranks may read different numbers of batches). Collective.
  void hold_gathered(bool on);

  // The whole model under its own names, on every rank (values cloned). Collective.
  nn::StateDict full_state_dict();
  // Every rank passes the same whole state; each keeps its pieces.
  void load_full_state_dict(const nn::StateDict& state);
  // The optimizer's state as one process's optimizer over the whole model holds it ("step", "lr",
  // "<parameter index>.<buffer>" with the parameter's shape), on every rank. Collective.
  nn::StateDict full_optimizer_state(const optim::Optimizer& optimizer);
  // Every rank passes the same whole state; each loads its pieces of it.
  void load_full_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state);

  // Which elements [begin, end) of model parameter `index` this rank's piece holds.
  Piece piece(size_t index) const;
  // After writing into parameters() directly (a sharded load): makes the model's parameters agree
  // with the pieces (stages 1 and 2 all-gather them; stage 3 gathers at the next use). Collective.
  void publish_pieces();

  // Live membership (stages 1 and 2): this rank's pieces now, after the trainer's `step`; how many
  // values rank `rank`'s pieces pack into with `buffers` optimizer buffers; and the whole model's
  // state and the whole optimizer's (as full_state_dict and full_optimizer_state give them) from
  // every rank's pieces, by_rank[r] rank r's, at one step. None is collective.
  // `into`, where it has the size, is written instead of a new tensor (a buffer kept for reuse).
  PackedPieces pack_pieces(const optim::Optimizer& optimizer, int64_t step, Tensor into = {}) const;
  int64_t packed_size(int rank, size_t buffers) const;
  // The parameters' part of any rank's packed pieces (it comes first): its chunk of every unit,
  // copied from the whole parameters this rank keeps (stages 1 and 2, after a step's gather).
  int64_t packed_parameters_size() const;
  static constexpr int64_t kPackedHeaderValues = 10;  // five int64 words
  void copy_parameter_chunks(int rank, Tensor& packed) const;
  std::pair<nn::StateDict, nn::StateDict> whole_state_of(const std::vector<PackedPieces>& by_rank) const;

  ZeroMemory memory(const optim::Optimizer* optimizer = nullptr) const;
  int stage() const;
  const std::vector<FlatUnit>& units() const;
  nn::Module& module();
  const dist::ProcessGroupPtr& group() const;
  // Bytes moved by this rank's collectives since construction (sent payload of reduce-scatters and
  // all-gathers), for the step metrics.
  int64_t bytes_communicated() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tessera::parallel::zero
