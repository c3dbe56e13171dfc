#include "tessera/parallel/zero/flat_unit.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::parallel::zero {

std::vector<FlatUnit> plan_units(const std::vector<std::vector<size_t>>& groups, const std::vector<int64_t>& sizes,
                                 int world) {
  TESSERA_CHECK(world >= 1, "[zero] world size must be >= 1, got ", world);
  std::vector<FlatUnit> units;
  for (const auto& group : groups) {
    if (group.empty()) continue;
    FlatUnit unit;
    unit.world = world;
    for (size_t i : group) {
      TESSERA_CHECK(i < sizes.size() && sizes[i] >= 0, "[zero] parameter index ", i, " is out of range (",
                    sizes.size(), " parameters)");
      unit.params.push_back(i);
      unit.offsets.push_back(unit.numel);
      unit.sizes.push_back(sizes[i]);
      unit.numel += sizes[i];
    }
    unit.chunk = std::max<int64_t>(1, (unit.numel + world - 1) / world);
    units.push_back(std::move(unit));
  }
  return units;
}

Piece piece_of(const FlatUnit& unit, size_t k, int rank) {
  TESSERA_CHECK(k < unit.params.size() && rank >= 0 && rank < unit.world, "[zero] piece ", k, " of rank ", rank,
                " is out of range (", unit.params.size(), " parameters, ", unit.world, " ranks)");
  const int64_t lo = static_cast<int64_t>(rank) * unit.chunk, hi = lo + unit.chunk;
  const int64_t first = unit.offsets[k], last = first + unit.sizes[k];
  const int64_t begin = std::clamp(lo, first, last), end = std::clamp(hi, first, last);
  Piece piece;
  piece.begin = begin - first;
  piece.end = std::max(begin, end) - first;
  piece.chunk_offset = begin - lo;
  if (piece.size() == 0) piece.chunk_offset = 0;
  return piece;
}

}  // namespace tessera::parallel::zero
