// The two text formats of a clip-text directory (data/clip_text.h), parsed from bytes alone so that
// a fuzz target can reach them: meta.json and one line of narrations.jsonl. Each either returns a
// checked value or throws ValueError saying what is wrong (the reader adds the file and line).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace tessera::data {

struct ClipTextMeta {
  int64_t frames = 0, feature_dim = 0, vocab = 0, words = 0, candidates = 0, clips = 0;
};

// Every field an integer in [1, bound]: the bounds keep a corrupt file from asking for absurd
// allocations (clips ≤ 2^31, vocab ≤ 2^40, the others ≤ 2^20).
ClipTextMeta parse_clip_text_meta(std::string_view json);

struct Narration {
  int64_t clip = 0;
  std::vector<int64_t> words;  // ids in [1, vocab), at most meta.words of them
  bool aligned = false;
};

// One line {"clip": i, "words": [ids], "aligned": bool} ("aligned" optional, false when absent).
Narration parse_narration_line(std::string_view line, const ClipTextMeta& meta);

}  // namespace tessera::data
