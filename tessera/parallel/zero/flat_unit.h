// FlatUnit: how ZeRO lays a group of parameters end to end in one flat buffer and cuts it into
// equal chunks, one per rank (DeepSpeed's partitions, FSDP's FlatParameter). Rank r owns elements
// [r·chunk, (r+1)·chunk) of every unit; the buffer is padded with zeros to world·chunk, so a
// reduce-scatter and an all-gather of the unit move equal blocks. A parameter may straddle ranks,
// be smaller than the world size, or leave some rank an empty piece: each rank's part of parameter
// k is one contiguous range (its piece), possibly empty.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::parallel::zero {

struct FlatUnit {
  std::vector<size_t> params;    // indices into the model's parameter list, in flat order
  std::vector<int64_t> offsets;  // each parameter's first element in the flat buffer
  std::vector<int64_t> sizes;    // each parameter's element count
  int64_t numel = 0;             // the parameters' elements, without padding
  int64_t chunk = 0;             // elements per rank: ceil(numel / world), at least 1
  int world = 1;
  int64_t padded() const { return chunk * world; }
};

// A parameter's piece on one rank: elements [begin, end) of the parameter, which sit at
// [chunk_offset, chunk_offset + end - begin) of that rank's chunk.
struct Piece {
  int64_t begin = 0, end = 0, chunk_offset = 0;
  int64_t size() const { return end - begin; }
};

// Lays out `groups` (lists of parameter indices; empty groups and empty parameters are allowed, an
// empty group makes no unit) of parameters with `sizes[i]` elements for `world` ranks.
std::vector<FlatUnit> plan_units(const std::vector<std::vector<size_t>>& groups, const std::vector<int64_t>& sizes,
                                 int world);

// Parameter k of `unit` (its position in unit.params) as rank `rank` holds it.
Piece piece_of(const FlatUnit& unit, size_t k, int rank);

}  // namespace tessera::parallel::zero
