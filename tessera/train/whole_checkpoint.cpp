#include "tessera/train/whole_checkpoint.h"

#include "tessera/parallel/zero/sharded_checkpoint.h"

namespace tessera::train {

io::CheckpointFiles whole_checkpoint(io::CheckpointFiles files) {
  if (files.shards.empty()) return files;
  auto [model, optimizer] = parallel::zero::consolidate_sharded(files.shards);
  files.model.tensors = std::move(model);
  files.trainer.tensors = std::move(optimizer);
  files.shards.clear();
  return files;
}

io::CheckpointFiles load_whole_checkpoint(const std::string& path) { return whole_checkpoint(io::load_checkpoint(path)); }

}  // namespace tessera::train
