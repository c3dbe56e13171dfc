#include "tessera/train/whole_checkpoint.h"

#include "tessera/io/piece_reader.h"

namespace tessera::train {

io::CheckpointFiles whole_checkpoint(io::CheckpointFiles files) {
  if (files.pieces.empty()) return files;
  io::PieceReader reader(files.pieces);
  io::WholeState whole = io::read_whole_state(reader);
  files.model.tensors = std::move(whole.model);
  files.trainer.tensors = std::move(whole.optimizer);
  files.pieces.clear();
  return files;
}

io::CheckpointFiles load_whole_checkpoint(const std::string& path) { return whole_checkpoint(io::load_checkpoint(path)); }

}  // namespace tessera::train
