#include "tessera/data/clip_text_format.h"

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera::data {

namespace {
constexpr int64_t kMaxDim = int64_t(1) << 20;
}  // namespace

ClipTextMeta parse_clip_text_meta(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ValueError("not a JSON object");
  auto field = [&](const char* name, int64_t bound) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_integer()) throw ValueError(std::string("needs an integer \"") + name + "\"");
    const int64_t v = it->get<int64_t>();
    if (v < 1 || v > bound) throw ValueError(detail::concat("\"", name, "\" = ", v, " is outside [1, ", bound, "]"));
    return v;
  };
  ClipTextMeta m;
  m.frames = field("frames", kMaxDim);
  m.feature_dim = field("feature_dim", kMaxDim);
  m.vocab = field("vocab", int64_t(1) << 40);
  m.words = field("words", kMaxDim);
  m.candidates = field("candidates", kMaxDim);
  m.clips = field("clips", int64_t(1) << 31);
  return m;
}

Narration parse_narration_line(std::string_view line, const ClipTextMeta& meta) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ValueError("not a JSON object");
  auto clip = j.find("clip");
  auto words = j.find("words");
  if (clip == j.end() || !clip->is_number_integer() || words == j.end() || !words->is_array())
    throw ValueError("needs {\"clip\": integer, \"words\": [ids]}");
  Narration n;
  n.clip = clip->get<int64_t>();
  if (n.clip < 0 || n.clip >= meta.clips) throw ValueError(detail::concat("clip ", n.clip, " is outside [0, ", meta.clips, ")"));
  if (static_cast<int64_t>(words->size()) > meta.words)
    throw ValueError(detail::concat(words->size(), " words, more than ", meta.words));
  for (const auto& w : *words) {
    if (!w.is_number_integer()) throw ValueError("a word id is not an integer");
    const int64_t id = w.get<int64_t>();
    if (id < 1 || id >= meta.vocab) throw ValueError(detail::concat("word id ", id, " is outside [1, ", meta.vocab, ")"));
    n.words.push_back(id);
  }
  if (auto aligned = j.find("aligned"); aligned != j.end()) {
    if (!aligned->is_boolean()) throw ValueError("\"aligned\" is not true or false");
    n.aligned = aligned->get<bool>();
  }
  return n;
}

}  // namespace tessera::data
