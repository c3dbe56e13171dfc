// Fuzz target: a sharded checkpoint's manifest (io/checkpoint_manifest.h), what a resume reads before
// any piece. Whatever the text, it ends in an IoError or in a manifest whose every piece lies inside
// its tensor, holds its region's bytes, and whose pieces cover each tensor exactly once.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/io/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  io::Manifest manifest;
  try {
    manifest = io::parse_manifest(text, "fuzz/manifest.json");
  } catch (const IoError&) {
    return 0;
  }
  for (const io::LogicalTensor& t : manifest.tensors) {
    int64_t covered = 0;
    for (const io::PieceRecord& p : t.pieces) {
      const auto runs = io::region_runs(p.region, t.shape);  // accepted, so inside its tensor
      for (const io::RegionRun& r : runs) {
        if (r.global < 0 || r.count <= 0 || r.global + r.count > shape_numel(t.shape)) std::abort();
        covered += r.count;
      }
      if (p.end - p.begin != static_cast<uint64_t>(p.region.numel()) * dtype_size(t.dtype)) std::abort();
    }
    if (covered != shape_numel(t.shape)) std::abort();  // each element exactly once
  }
  return 0;
}
