// Fuzz target: the text formats of a clip-text directory (data/clip_text_format.h). The input's
// first line is meta.json, every further line a line of narrations.jsonl: each ends in a checked
// value or a ValueError, never another exception, a read out of bounds or an id out of range.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "tessera/core/error.h"
#include "tessera/data/clip_text_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::data;
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  std::string first;
  std::getline(lines, first);
  ClipTextMeta meta;
  try {
    meta = parse_clip_text_meta(first);
  } catch (const ValueError&) {
    meta = ClipTextMeta{2, 3, 100, 6, 2, 10};  // go on with the lines against a valid meta
  }
  if (meta.clips < 1 || meta.words < 1 || meta.vocab < 1) std::abort();
  for (std::string line; std::getline(lines, line);) {
    try {
      Narration n = parse_narration_line(line, meta);
      if (n.clip < 0 || n.clip >= meta.clips || static_cast<int64_t>(n.words.size()) > meta.words) std::abort();
      for (int64_t id : n.words)
        if (id < 1 || id >= meta.vocab) std::abort();
    } catch (const ValueError&) {
    }
  }
  return 0;
}
