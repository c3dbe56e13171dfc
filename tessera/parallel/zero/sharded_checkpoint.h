// Sharded checkpoints of a ZeRO job in the one sharded format (io/checkpoint_manifest.h): each rank
// writes only its own pieces, so no rank ever holds the whole training state (DeepSpeed's per-rank
// checkpoint files, FSDP's sharded state dict). A rank's pieces are, per parameter, its elements
// [begin, end) of model/<parameter> as a flat region, with the same range of each optimizer buffer
// (optimizer/<index>.<buffer>); rank 0 adds the model's buffers (BatchNorm statistics) and the
// optimizer's step and lr whole. Such a directory loads at any world size and stage, and at any
// other layout (the trainer's strategies read the same format), each rank reading only the pieces
// that overlap its own.
#pragma once
#include <string>
#include <vector>

#include "tessera/io/piece_reader.h"
#include "tessera/io/piece_writer.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/zero/zero_data_parallel.h"

namespace tessera::parallel::zero {

// This rank's pieces (for io::write_rank_pieces).
std::vector<io::SavePiece> sharded_pieces(ZeroDataParallel& zero, const optim::Optimizer& optimizer);
// The model's logical tensors in the model's order (for io::write_manifest).
std::vector<std::string> sharded_order(ZeroDataParallel& zero);
// Fills this rank's pieces of the parameters and its optimizer (built over zero.parameters()) from a
// sharded checkpoint of any layout. IoError naming the tensor where the checkpoint lacks one of the
// model's or holds it at another shape. Collective (the pieces are published afterwards).
void load_pieces(ZeroDataParallel& zero, optim::Optimizer& optimizer, io::PieceReader& reader);

// Both in one call, for a job outside the trainer: every rank writes its pieces into `dir`, rank 0
// the manifest once all have. Collective.
void save_sharded(ZeroDataParallel& zero, const optim::Optimizer& optimizer, const std::string& dir);
void load_sharded(ZeroDataParallel& zero, optim::Optimizer& optimizer, const std::string& dir);

}  // namespace tessera::parallel::zero
