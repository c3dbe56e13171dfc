// The safetensors layout (safetensors.h) read and checked from untrusted bytes without making any
// tensor: the header's entries and metadata, the data section tiled exactly by the tensors, and the
// checksums. Split from safetensors.cpp so that the part that reads what a file claims is fuzzed on
// its own (fuzz/safetensors_fuzz.cpp); decode_safetensors then only copies the checked ranges.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/shape.h"

namespace tessera::io {

using Metadata = std::map<std::string, std::string>;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

struct SafetensorsLayout {
  std::vector<SafetensorsEntry> entries;  // sorted by offset; they tile `data` exactly
  Metadata metadata;
  std::string_view data;                  // the data section, inside the bytes parsed
};

// IoError "[safetensors] <source>: <problem>" for anything malformed: a header length past the file
// or 100 MiB, JSON that is not an object of entries, a duplicate name, an unknown dtype, a shape
// that overflows or does not match its byte range, ranges that leave a gap or overlap, a checksum
// that is malformed or does not match. Never reads outside `bytes`.
SafetensorsLayout parse_safetensors_layout(std::string_view bytes, const std::string& source);

namespace safetensors_detail {
inline constexpr const char* kChecksumKey = "tessera.checksum";
inline constexpr std::string_view kTensorChecksumPrefix = "tessera.crc32.";  // + the tensor's name
const char* dtype_code(DType t);
// "F32" -> Float32, ...; false for a code tessera does not read.
bool dtype_from_code(const std::string& code, DType& out);
uint32_t crc32_update(uint32_t crc, const void* data, size_t size);
std::string checksum_string(uint32_t crc);
}  // namespace safetensors_detail

}  // namespace tessera::io
