// Where a unit's whole parameters are between their uses: the policy that tells ZeRO's stages
// apart, as FSDP's sharding strategies do, so that a new layout (hybrid sharding within a host,
// parameters offloaded to host memory) is a new implementation rather than branches through
// zero_data_parallel.cpp:
//   ReplicatedParameters  (stages 1, 2) every rank keeps the whole parameters; units are DDP-style
//                         buckets in reverse order; after the step each rank's updated chunk is
//                         all-gathered into them
//   ShardedParameters     (stage 3) a rank keeps its chunk only; units are runs of the model's
//                         layers, gathered around their forward and backward and freed after
// When gradients are reduce-scattered (at the end of backward for stage 1, as each unit's are ready
// for stages 2 and 3) is the other half of a stage: ZeroDataParallel's reduce_during_backward.
#pragma once
#include <memory>
#include <vector>

#include "tessera/parallel/zero/zero_units.h"

namespace tessera::parallel::zero {

struct ZeroOptions;

class ParameterLayout {
 public:
  virtual ~ParameterLayout() = default;
  // The parameters grouped into units (indices into units.params), and the order the units'
  // gradients become ready in backward.
  virtual std::vector<std::vector<size_t>> group_parameters(nn::Module& model, const ZeroUnits& units) = 0;
  virtual std::vector<size_t> gradient_order(size_t unit_count) const = 0;
  // This rank's chunk of a unit, to keep: the chunk of the whole values itself, or a copy of it
  // apart from them (so that the whole values can be freed).
  virtual Tensor keep_chunk(const Tensor& chunk_of_full) const = 0;
  // After the units are built: where the layout starts (sharded: every unit freed).
  virtual void start() {}

  // The model's forward (sharded: each unit gathered around its layers).
  virtual Tensor forward(nn::Module& model, const Tensor& input) = 0;
  // A unit's gradients were handed to their reduce-scatter: its values are not needed in this pass.
  virtual void after_gradients_sent(size_t /*unit*/) {}
  // The end of a backward pass (or its failure).
  virtual void after_backward() {}
  // After the optimizer updated this rank's chunks: every rank's whole parameters see the new values
  // (replicated: all-gathered now; sharded: at the next gather).
  virtual void publish() = 0;
  // Around reading or writing the whole parameters (a checkpoint).
  virtual void gather_whole() {}
  virtual void release_whole() {}
  // Around writing the whole parameters (a loaded checkpoint): their memory is there to write, and
  // after, this rank's chunk takes its part.
  virtual void before_whole_written() {}
  virtual void after_whole_written() {}
  // Keep every unit gathered until released again (an evaluation's several forwards).
  virtual void hold_gathered(bool /*on*/) {}
  // Whether the chunks are kept apart from the whole values (their bytes count on their own).
  virtual bool chunks_apart() const = 0;
};

// The layout of ZeRO stage `options.stage`.
std::shared_ptr<ParameterLayout> make_parameter_layout(ZeroUnits& units, const ZeroOptions& options);

}  // namespace tessera::parallel::zero
