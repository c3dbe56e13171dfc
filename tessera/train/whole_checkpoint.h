// A checkpoint as one process's whole state, whatever wrote it: a sharded step
// (io::CheckpointFiles::pieces, train.checkpoint_format = "sharded") consolidated into the model's and
// the optimizer's tensors under single-process names (io::read_whole_state), any other as it was
// read. What `tessera eval`, `generate`, `serve` and `checkpoint convert` read.
#pragma once
#include <string>

#include "tessera/io/checkpoint.h"

namespace tessera::train {

io::CheckpointFiles whole_checkpoint(io::CheckpointFiles files);
// io::load_checkpoint(path), made whole.
io::CheckpointFiles load_whole_checkpoint(const std::string& path);

}  // namespace tessera::train
