// A checkpoint as one process's whole state, whatever wrote it: a ZeRO run's sharded step
// (io::CheckpointFiles::shards, distributed.zero_checkpoint = "sharded") consolidated into the model's
// and the optimizer's tensors under single-process names (parallel/zero/sharded_checkpoint.h), any
// other as it was read. What `tessera eval` and `generate` read, and a resume under a strategy that
// cannot read shards.
#pragma once
#include <string>

#include "tessera/io/checkpoint.h"

namespace tessera::train {

io::CheckpointFiles whole_checkpoint(io::CheckpointFiles files);
// io::load_checkpoint(path), made whole.
io::CheckpointFiles load_whole_checkpoint(const std::string& path);

}  // namespace tessera::train
