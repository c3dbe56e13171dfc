// The manifest of a sharded checkpoint: the contract between the ranks that write their pieces of a
// training state and any layout that reads it back (PyTorch DCP's metadata, DeepSpeed's universal
// checkpoint). A checkpoint's state is a set of logical tensors under layout-free names:
//   model/<state_dict name>           the whole model's parameters and buffers, single-process names
//   optimizer/<index>.<buffer>        one process's optimizer state over the whole model (index: the
//                                     parameter's position in the model's named_parameters)
//   optimizer/step, optimizer/lr      its scalars
// Each logical tensor is stored as pieces, each piece a Region of it held whole by one tensor of one
// rank's safetensors file. The directory holds
//   rank-<r>-of-<w>.safetensors   rank r's pieces (PyTorch reads them by name)
//   manifest.json                 written last, by rank 0, once every rank's pieces are in place:
//                                 {"format": "tessera-pieces", "version": 1, "writers": w,
//                                  "tensors": [{"name", "dtype", "shape", "pieces": [{"file", "key",
//                                  "offsets", "lengths", "flat", "begin", "end", "crc32"}]}]}
// A reader finds which pieces overlap the region it holds, reads their bytes (begin, end: the byte
// range in the file) and checks them against the piece's CRC-32, so a rank reads only the pieces it
// needs, at any layout and world size.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/shape.h"

namespace tessera::io {

// A part of a logical tensor: a box (an offset and a length per dimension, as a tensor-parallel shard
// or a pipeline stage's whole tensor), or, for a piece cut from the tensor flattened in row-major
// order (ZeRO's), the range of elements [offsets[0], offsets[0] + lengths[0]).
struct Region {
  bool flat = false;
  std::vector<int64_t> offsets, lengths;

  static Region whole(const Shape& shape);
  static Region box(std::vector<int64_t> offsets, std::vector<int64_t> lengths);
  static Region flat_range(int64_t begin, int64_t end);
  int64_t numel() const;
  // The shape of the region's elements as a piece holds them: the lengths of a box, {count} when flat.
  Shape shape() const;
  bool operator==(const Region&) const = default;
};

// Elements contiguous both in the logical tensor (from flat index `global`) and in a region's own
// row-major buffer (from `local`).
struct RegionRun {
  int64_t global = 0, local = 0, count = 0;
};

// The runs of `region` over a tensor of `shape`, in ascending global order (trailing dimensions a
// box covers whole are merged into one run). ValueError when the region is not inside the shape.
std::vector<RegionRun> region_runs(const Region& region, const Shape& shape);

struct PieceRecord {
  std::string file;  // relative to the manifest's directory
  std::string key;   // the tensor's name in that file
  Region region;
  uint64_t begin = 0, end = 0;  // the piece's bytes in the file
  uint32_t crc32 = 0;           // over those bytes
};

struct LogicalTensor {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  std::vector<PieceRecord> pieces;
};

struct Manifest {
  int writers = 0;                     // the ranks that wrote pieces
  std::vector<LogicalTensor> tensors;  // in the order the writers listed them
};

inline constexpr const char* kManifestFile = "manifest.json";
// The prefixes of the model's and the optimizer's logical tensors.
inline constexpr const char* kModelTensors = "model/";
inline constexpr const char* kOptimizerTensors = "optimizer/";

std::string manifest_json(const Manifest& manifest);
// Parses and checks a manifest: IoError "[checkpoint] <source>: ..." when it is malformed, a piece
// lies outside its tensor or its byte range does not fit its region, or (`whole`: a whole
// checkpoint's manifest, not one rank's records) a tensor's pieces do not cover it exactly once
// (naming the tensor and the elements missing or held twice, with the files).
Manifest parse_manifest(std::string_view text, const std::string& source, bool whole = true);

}  // namespace tessera::io
