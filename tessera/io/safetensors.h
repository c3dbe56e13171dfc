// The Hugging Face safetensors format, so that PyTorch (safetensors.torch.load_file) and the Hub
// tools read our checkpoints and we read theirs:
//   [8-byte little-endian N][N bytes of JSON header, space-padded][data section]
// The header maps each tensor name to {"dtype": "F32"|"I64"|"BF16", "shape": [...],
// "data_offsets": [begin, end]} (relative to the data section), plus an optional
// "__metadata__": {string: string}. The tensors tile the data section exactly (no gaps, no overlap),
// as the reference implementation requires.
//
// We add metadata "tessera.crc32.<tensor name>" = "crc32:<8 hex digits>" over each tensor's bytes,
// and "tessera.checksum" (same form) over the whole data section, because the format itself has none
// and a torn or bit-flipped checkpoint must not silently load. The per-tensor ones let the error name
// the tensor that was hit; the whole-section one is what tessera files before them carry.
#pragma once
#include <map>
#include <string>
#include <string_view>

#include "tessera/io/safetensors_layout.h"
#include "tessera/nn/module.h"

namespace tessera::io {

struct SafetensorsFile {
  nn::StateDict tensors;  // in file order (sorted by data offset)
  Metadata metadata;      // as stored, "tessera.checksum" and "tessera.crc32.*" included when present
};

// Writes the tensors contiguously in the given order (non-contiguous views are made contiguous);
// the header is padded with spaces so the data section starts 8-aligned. Any "tessera.checksum" or
// "tessera.crc32.*" in `metadata` is replaced by the checksums of this data. ValueError for an undefined tensor, an empty,
// reserved ("__metadata__") or duplicate name, or names/metadata that are not valid UTF-8.
std::string encode_safetensors(const nn::StateDict& tensors, const Metadata& metadata = {});

// Parses and validates `bytes`; `source` (a path) names the file in errors. IoError "[safetensors]
// <source>: <problem>" for anything malformed: never reads out of bounds, whatever the input.
// Each tensor's checksum is verified when the metadata holds one (an IoError naming the tensor), the
// whole-section one when some tensor has none; files from other tools have neither and load as is.
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& source);

// encode_safetensors + write_file_atomic: a crash leaves the old file or the new one, never a mix.
void save_safetensors(const std::string& path, const nn::StateDict& tensors, const Metadata& metadata = {});
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace tessera::io
