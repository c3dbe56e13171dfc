// Sharded checkpoints of a ZeRO job: each rank writes only its own pieces, so no rank ever holds the
// whole training state (DeepSpeed's per-rank checkpoint files, FSDP's sharded state dict). A
// directory holds
//   shard-<r>-of-<N>.safetensors   rank r's pieces: the values as "<parameter>" and the optimizer's
//                                  buffers as "optimizer/<parameter>/<buffer>" (1-D), with metadata
//                                  tessera.zero.rank, tessera.zero.world and, per parameter,
//                                  tessera.zero.piece.<parameter> = "<begin> <end>" (its elements);
//                                  rank 0's also holds the model's buffers (BatchNorm statistics)
//                                  whole, as "buffer/<name>";
//   index.json                     written by rank 0 after every shard is in place: the world size,
//                                  the stage, the parameters' names and shapes in order, the
//                                  optimizer's step and lr, and the shard files.
// Every file is written atomically, and the index last: a directory without it is an interrupted save
// and is refused. A load reads the shards one at a time and keeps only the ranges its own pieces
// need, so it works at any world size and stage; consolidate_sharded() makes one process's whole
// state from the same files without a process group (`tessera eval`/`generate`, or a one-process
// resume).
#pragma once
#include <string>
#include <utility>

#include "tessera/optim/optimizer.h"
#include "tessera/parallel/zero/zero_data_parallel.h"

namespace tessera::parallel::zero {

// Writes this rank's shard into `dir` (created if needed); rank 0 writes the index once every rank
// has written. Collective.
void save_sharded(ZeroDataParallel& zero, const optim::Optimizer& optimizer, const std::string& dir);

// Loads a directory written by save_sharded at any world size and stage into this job's pieces and
// optimizer (built over zero.parameters()). IoError naming the file for a missing index, a missing
// or mismatched shard, or parameters that do not match the model. Collective.
void load_sharded(ZeroDataParallel& zero, optim::Optimizer& optimizer, const std::string& dir);

// The whole model (parameters, then buffers) and the optimizer state as one process's optimizer over
// the whole model holds it ("step", "lr", "<index>.<buffer>"), from a sharded directory.
std::pair<nn::StateDict, nn::StateDict> consolidate_sharded(const std::string& dir);

}  // namespace tessera::parallel::zero
