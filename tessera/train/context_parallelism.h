// Context parallelism over the data-parallel ranks (parallel.cp = N): those of DDP, ZeRO or HSDP (the
// world), or the mesh's data-parallel dimension. The ranks form groups of N consecutive ranks; each
// group reads the same batches (one data-parallel replica), and each rank of a group keeps T/N tokens
// of every sequence (parallel/context/layout.h). The GPT's attention runs over the group
// (parallel.cp_attention: ring or Ulysses), everything else is per token. The strategy still
// averages every gradient over those ranks: each rank's loss is the mean over its tokens, the same
// number on every rank, so the average is the mean over the global batch's tokens, one process's.
// Activations per rank fall to 1/N; attention's scores too with the ring (one (T/N)² block at a
// time), while Ulysses holds H/N heads of the whole T × T.
#pragma once
#include <string>

#include "tessera/data/dataset.h"
#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/context/layout.h"
#include "tessera/train/strategy.h"

namespace tessera::train {

class ContextParallelism {
 public:
  // Collective over `world`: creates the context groups.
  ContextParallelism(dist::ProcessGroupPtr world, int ranks_per_group, parallel::context::ContextAttention attention);
  // Spreads the model's sequence over this rank's group; the model must be the GPT (CharTransformer).
  void spread(nn::Module& model);
  // This rank's tokens of every sequence: inputs and targets (B, T) -> (B, T/N).
  data::Batch part_of(const data::Batch& batch) const;
  // The mean of the group's values (each rank's loss over its tokens -> the loss over the batch).
  double mean_over_group(double value) const;
  // Evaluation sums added up over the job count each batch once per rank of a group (each rank with
  // the mean loss of its tokens): divides them back to one replica's.
  void count_groups_once(EvalSums& sums) const;
  int ranks() const { return ranks_; }
  int replica() const { return world_->rank() / ranks_; }
  int replicas() const { return world_->size() / ranks_; }
  std::string describe() const;  // "context group 0 of 2 (ranks 0-1): tokens 1/2 of each sequence"

 private:
  dist::ProcessGroupPtr world_, group_;
  int ranks_;
  parallel::context::ContextAttention attention_;
};

}  // namespace tessera::train
