// Fuzz target: the safetensors reader's layout check (io/safetensors_layout.h), everything that
// reads what a checkpoint file claims. Whatever the bytes, it ends in an IoError or in entries that
// tile the data section exactly, each holding numel x dtype bytes, inside the input.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/io/safetensors_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  io::SafetensorsLayout layout;
  try {
    layout = io::parse_safetensors_layout(bytes, "fuzz.safetensors");
  } catch (const IoError&) {
    return 0;
  }
  if (layout.data.data() < bytes.data() || layout.data.data() + layout.data.size() > bytes.data() + bytes.size())
    std::abort();  // the data section must lie inside the input
  uint64_t pos = 0;
  for (const auto& e : layout.entries) {
    if (e.begin != pos || e.end < e.begin) std::abort();  // a gap, an overlap or a reversed range
    unsigned __int128 bytes_needed = dtype_size(e.dtype);
    for (int64_t d : e.shape) bytes_needed *= static_cast<uint64_t>(d);
    if (bytes_needed != e.end - e.begin) std::abort();  // the shape must fill its range exactly
    pos = e.end;
  }
  if (pos != layout.data.size()) std::abort();
  return 0;
}
