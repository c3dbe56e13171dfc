#include "tessera/data/clip_text.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops/ops.h"

namespace tessera::data {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("[clip_text] cannot open " + path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

ClipTextMeta parse_meta(const fs::path& path) {
  try {
    return parse_clip_text_meta(read_text(path));
  } catch (const ValueError& e) {
    throw IoError("[clip_text] " + path.string() + ": " + e.what());
  }
}

}  // namespace

ClipTextDataset::ClipTextDataset(ClipTextMeta meta, Tensor features, Tensor words, std::vector<int64_t> aligned)
    : meta_(meta), features_(std::move(features)), words_(std::move(words)), aligned_(std::move(aligned)) {}

Batch ClipTextDataset::get_batch(const std::vector<int64_t>& indices) const {
  Tensor idx = from_vector(indices, {static_cast<int64_t>(indices.size())});
  // index_select gathers float32 rows; the word ids (int64) are copied row by row.
  const int64_t row = meta_.candidates * meta_.words;
  Tensor words = Tensor::empty({static_cast<int64_t>(indices.size()), meta_.candidates, meta_.words}, DType::Int64);
  const int64_t* from = words_.data<int64_t>();
  int64_t* to = words.data<int64_t>();
  for (size_t i = 0; i < indices.size(); ++i) {
    TESSERA_CHECK_INDEX(indices[i] >= 0 && indices[i] < meta_.clips, "[clip_text] clip ", indices[i], " of ", meta_.clips);
    std::copy(from + indices[i] * row, from + (indices[i] + 1) * row, to + static_cast<int64_t>(i) * row);
  }
  return {index_select(features_, 0, idx), words};
}

Tensor ClipTextDataset::aligned_narrations() const {
  const int64_t k = meta_.candidates, l = meta_.words;
  const std::vector<int64_t> all = words_.to_vector<int64_t>();
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(meta_.clips * l));
  for (int64_t i = 0; i < meta_.clips; ++i) {
    TESSERA_CHECK(aligned_[static_cast<size_t>(i)] >= 0, "[clip_text] clip ", i, " has no aligned narration to query with");
    const int64_t at = (i * k + aligned_[static_cast<size_t>(i)]) * l;
    out.insert(out.end(), all.begin() + at, all.begin() + at + l);
  }
  return from_vector(out, {meta_.clips, l});
}

std::shared_ptr<ClipTextDataset> load_clip_text(const std::string& dir_name) {
  const fs::path dir(dir_name);
  const ClipTextMeta m = parse_meta(dir / "meta.json");
  // Features: the shards in name order, each (n, T, F), n summing to N.
  std::vector<fs::path> shards;
  if (!fs::is_directory(dir)) throw IoError("[clip_text] " + dir_name + " is not a directory");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("features-", 0) == 0 && entry.path().extension() == ".safetensors") shards.push_back(entry.path());
  }
  std::sort(shards.begin(), shards.end());
  if (shards.empty()) throw IoError("[clip_text] " + dir_name + " has no features-*.safetensors shard");
  std::vector<Tensor> pieces;
  int64_t clips = 0;
  for (const fs::path& shard : shards) {
    io::SafetensorsFile file = io::load_safetensors(shard.string());
    auto it = std::find_if(file.tensors.begin(), file.tensors.end(), [](const auto& kv) { return kv.first == "features"; });
    if (it == file.tensors.end()) throw IoError("[clip_text] " + shard.string() + " holds no \"features\" tensor");
    const Tensor& f = it->second;
    if (f.dtype() != DType::Float32 || f.dim() != 3 || f.shape()[1] != m.frames || f.shape()[2] != m.feature_dim)
      throw IoError(detail::concat("[clip_text] ", shard.string(), ": \"features\" is ", dtype_name(f.dtype()), " ",
                                   shape_str(f.shape()), ", meta.json says float32 (n, ", m.frames, ", ", m.feature_dim, ")"));
    clips += f.shape()[0];
    if (clips > m.clips)
      throw IoError(detail::concat("[clip_text] ", dir_name, ": the shards hold more than the ", m.clips, " clips of meta.json"));
    pieces.push_back(f);
  }
  if (clips != m.clips)
    throw IoError(detail::concat("[clip_text] ", dir_name, ": the shards hold ", clips, " clips, meta.json says ", m.clips));
  Tensor features = pieces.size() == 1 ? pieces[0] : cat(pieces, 0);

  // Narrations: K per clip, each at most L ids in [1, V).
  const fs::path jsonl = dir / "narrations.jsonl";
  std::ifstream in(jsonl);
  if (!in) throw IoError("[clip_text] cannot open " + jsonl.string());
  const int64_t k = m.candidates, l = m.words;
  if (k * l > (int64_t(1) << 31) / m.clips)
    throw IoError(detail::concat("[clip_text] ", dir_name, ": ", m.clips, " clips × ", k, " narrations × ", l,
                                 " words is more word ids than a set may hold (2^31)"));
  std::vector<int64_t> words(static_cast<size_t>(m.clips * k * l), 0), filled(static_cast<size_t>(m.clips), 0),
      aligned(static_cast<size_t>(m.clips), -1);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto bad = [&](const std::string& why) {
      return IoError(detail::concat("[clip_text] ", jsonl.string(), ":", number, ": ", why));
    };
    Narration n;
    try {
      n = parse_narration_line(line, m);
    } catch (const ValueError& e) {
      throw bad(e.what());
    }
    int64_t& slot = filled[static_cast<size_t>(n.clip)];
    if (slot >= k) throw bad(detail::concat("clip ", n.clip, " has more than ", k, " narrations"));
    for (size_t w = 0; w < n.words.size(); ++w)
      words[static_cast<size_t>((n.clip * k + slot) * l + static_cast<int64_t>(w))] = n.words[w];
    if (n.aligned && aligned[static_cast<size_t>(n.clip)] < 0) aligned[static_cast<size_t>(n.clip)] = slot;
    ++slot;
  }
  for (int64_t i = 0; i < m.clips; ++i)
    if (filled[static_cast<size_t>(i)] != k)
      throw IoError(detail::concat("[clip_text] ", jsonl.string(), ": clip ", i, " has ", filled[static_cast<size_t>(i)],
                                   " narrations, meta.json says ", k));
  return std::make_shared<ClipTextDataset>(m, features, from_vector(words, {m.clips, k, l}), std::move(aligned));
}

void write_synthetic_clip_text(const std::string& dir_name, const SyntheticClipTextOptions& o) {
  TESSERA_CHECK(o.clips > 0 && o.frames > 0 && o.feature_dim > 0 && o.candidates > 0 && o.clips_per_shard > 0,
                "[clip_text] the synthetic set needs positive sizes");
  TESSERA_CHECK(o.signature_words >= 1 && o.signature_words <= o.words && o.vocab > o.words,
                "[clip_text] signature_words must be in [1, words] and vocab > words, got ", o.signature_words, ", ",
                o.words, ", ", o.vocab);
  const fs::path dir(dir_name);
  fs::create_directories(dir);
  std::mt19937_64 appearance_rng(o.seed * 2 + 1);  // A depends on the seed alone
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> appearance(static_cast<size_t>(o.vocab * o.feature_dim));
  for (float& a : appearance) a = normal(appearance_rng);
  std::mt19937_64 rng(o.seed * 1000003 + o.stream * 7919 + 17);
  std::uniform_int_distribution<int64_t> word(1, o.vocab - 1);
  std::uniform_real_distribution<float> strength(0.5f, 1.5f);
  std::uniform_int_distribution<int64_t> position(0, o.candidates - 1);

  std::string narrations;
  std::vector<float> shard;
  int64_t shard_index = 0, in_shard = 0;
  auto flush = [&] {
    if (in_shard == 0) return;
    char name[64];
    std::snprintf(name, sizeof name, "features-%05lld.safetensors", static_cast<long long>(shard_index++));
    io::save_safetensors((dir / name).string(), {{"features", from_vector(shard, {in_shard, o.frames, o.feature_dim})}});
    shard.clear();
    in_shard = 0;
  };
  for (int64_t clip = 0; clip < o.clips; ++clip) {
    std::vector<int64_t> signature;
    while (static_cast<int64_t>(signature.size()) < o.signature_words) {
      const int64_t w = word(rng);
      if (std::find(signature.begin(), signature.end(), w) == signature.end()) signature.push_back(w);
    }
    for (int64_t t = 0; t < o.frames; ++t) {
      std::vector<float> frame(static_cast<size_t>(o.feature_dim), 0.0f);
      for (int64_t w : signature) {
        const float s = strength(rng);
        for (int64_t f = 0; f < o.feature_dim; ++f) frame[static_cast<size_t>(f)] += s * appearance[static_cast<size_t>(w * o.feature_dim + f)];
      }
      for (float& v : frame) v += o.noise * normal(rng);
      shard.insert(shard.end(), frame.begin(), frame.end());
    }
    const int64_t aligned_at = position(rng);
    for (int64_t c = 0; c < o.candidates; ++c) {
      std::vector<int64_t> ids;
      if (c == aligned_at) ids = signature;
      while (static_cast<int64_t>(ids.size()) < o.words) ids.push_back(word(rng));
      std::shuffle(ids.begin(), ids.end(), rng);
      nlohmann::json line{{"clip", clip}, {"words", ids}, {"aligned", c == aligned_at}};
      narrations += line.dump() + "\n";
    }
    if (++in_shard == o.clips_per_shard) flush();
  }
  flush();
  io::write_file_atomic((dir / "narrations.jsonl").string(), narrations);
  nlohmann::json meta{{"frames", o.frames}, {"feature_dim", o.feature_dim}, {"vocab", o.vocab}, {"words", o.words},
                      {"candidates", o.candidates}, {"clips", o.clips}};
  io::write_file_atomic((dir / "meta.json").string(), meta.dump(2) + "\n");
}

ClipTextMeta read_clip_text_meta(const std::string& dir) { return parse_meta(fs::path(dir) / "meta.json"); }

PackedClipText::PackedClipText(std::shared_ptr<ClipTextDataset> clips) : clips_(std::move(clips)) {
  TESSERA_CHECK(clips_->meta().vocab < (int64_t{1} << 24), "[clip_text] a vocabulary of ", clips_->meta().vocab,
                " words: packed ids travel as float32, exact below 2^24");
}

Batch PackedClipText::get_batch(const std::vector<int64_t>& indices) const {
  const ClipTextMeta& m = clips_->meta();
  const int64_t n = static_cast<int64_t>(indices.size()), frame_values = m.frames * m.feature_dim,
                ids = m.candidates * m.words, width = frame_values + ids;
  Tensor inputs = Tensor::empty({n, width}, DType::Float32), targets = Tensor::empty({n}, DType::Int64);
  const float* features = clips_->features().data<float>();
  const int64_t* words = clips_->words().data<int64_t>();
  float* out = inputs.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = indices[static_cast<size_t>(i)];
    TESSERA_CHECK_INDEX(c >= 0 && c < m.clips, "[clip_text] clip ", c, " of ", m.clips);
    std::copy(features + c * frame_values, features + (c + 1) * frame_values, out + i * width);
    for (int64_t w = 0; w < ids; ++w) out[i * width + frame_values + w] = static_cast<float>(words[c * ids + w]);
    targets.data<int64_t>()[i] = clips_->aligned()[static_cast<size_t>(c)];
  }
  return {inputs, targets};
}

}  // namespace tessera::data
