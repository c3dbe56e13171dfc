// Writing a sharded checkpoint (the format: checkpoint_manifest.h). Every rank writes the pieces it
// holds; then rank 0, once every rank has, writes the manifest, so a directory without one is a save
// that did not finish and is never read.
#pragma once
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/io/checkpoint_manifest.h"
#include "tessera/nn/module.h"

namespace tessera::io {

struct SavePiece {
  std::string name;  // the logical tensor's ("model/fc1.weight", "optimizer/3.exp_avg")
  Shape shape;       // the logical tensor's whole shape
  Region region;     // the part of it this piece holds
  Tensor data;       // the region's elements in row-major order (any shape of that many), on any device
};

// Writes rank `rank` of `world`'s pieces into `dir` (created if needed) as rank-<r>-of-<w>.safetensors,
// and the records the manifest will list as rank-<r>-of-<w>.json, each atomically. ValueError for a
// piece whose data does not match its region, or pieces of one tensor that disagree on its shape.
void write_rank_pieces(const std::string& dir, int rank, int world, const std::vector<SavePiece>& pieces);

// Once every rank of `world` has written: merges their records into manifest.json, checked as a reader
// checks it (so a save whose pieces leave part of a tensor out fails here, naming it), written
// atomically, and removes the records. IoError naming a rank whose records are missing. The manifest
// lists the tensors named in `order` first, in that order (the whole model's, so that a consolidated
// checkpoint lists the model as one process holds it), then the optimizer's scalars and its buffers by
// parameter index, then any others as the ranks listed them.
void write_manifest(const std::string& dir, int world, const std::vector<std::string>& order = {});

// A whole state as pieces, one per tensor: the model's under model/<name>, the optimizer's (one
// process's: "step", "lr", "<index>.<buffer>") under optimizer/<key>. What read_whole_state reads.
std::vector<SavePiece> whole_state_pieces(const nn::StateDict& model, const nn::StateDict& optimizer);

}  // namespace tessera::io
