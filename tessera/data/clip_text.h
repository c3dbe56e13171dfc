// Pre-extracted clip features and their narrations, the layout video-text training reads once the
// features of HowTo100M (or any video set) are extracted:
//
//   DIR/meta.json                   {"frames": T, "feature_dim": F, "vocab": V, "words": L,
//                                    "candidates": K, "clips": N}
//   DIR/features-00000.safetensors  "features": float32 (n, T, F); the shards, in name order, hold
//   DIR/features-00001.safetensors  clips 0..N-1 in order
//   DIR/narrations.jsonl            {"clip": i, "words": [ids], "aligned": true|false}, K lines per
//                                   clip (any order); ids in [1, V), at most L of them, padded with
//                                   id 0; "aligned" marks a narration known to match (evaluation
//                                   only: training never reads it)
//
// As a Dataset: inputs the clips' features (B, T, F), targets their candidates' word ids (B, K, L).
// Every file is checked as read: a wrong shape, a clip without K narrations, an id out of range or a
// malformed line is an IoError naming the file and the line.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/clip_text_format.h"
#include "tessera/data/dataset.h"

namespace tessera::data {

class ClipTextDataset : public Dataset {
 public:
  ClipTextDataset(ClipTextMeta meta, Tensor features, Tensor words, std::vector<int64_t> aligned);
  int64_t size() const override { return meta_.clips; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const ClipTextMeta& meta() const { return meta_; }
  // Every clip's first aligned narration (L word ids), as (N, L): the retrieval queries.
  Tensor aligned_narrations() const;
  const Tensor& features() const { return features_; }
  const Tensor& words() const { return words_; }
  const std::vector<int64_t>& aligned() const { return aligned_; }

 private:
  ClipTextMeta meta_;
  Tensor features_;              // (N, T, F)
  Tensor words_;                 // (N, K, L) int64
  std::vector<int64_t> aligned_; // per clip: the candidate index of its first aligned narration, -1 if none
};

std::shared_ptr<ClipTextDataset> load_clip_text(const std::string& dir);
// DIR/meta.json alone (an IoError naming it when absent or wrong).
ClipTextMeta read_clip_text_meta(const std::string& dir);

// The same clips for the trainer (model.name = "milnce", nn::MilNceModel): one input row per clip,
// (T·F + K·L) float32 — its frame features, then its K narrations' word ids as floats — and as the
// target the index of its first aligned narration (-1 if none; evaluation never needs it: the
// objective scores the clip against the batch's other clips).
class PackedClipText : public Dataset {
 public:
  explicit PackedClipText(std::shared_ptr<ClipTextDataset> clips);
  int64_t size() const override { return clips_->size(); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const ClipTextDataset& clips() const { return *clips_; }

 private:
  std::shared_ptr<ClipTextDataset> clips_;
};

// A synthetic set with a planted clip-text correspondence, in the layout above. Each word id w has a
// fixed "appearance" A[w] (F values, N(0, 1), from `seed` alone); clip i has `signature_words` words
// of its own, and each frame shows each of them at a random strength in [0.5, 1.5] plus N(0, noise²)
// per value. One of its K narrations (at a random position) holds its signature words and random
// fillers; the other K - 1 hold random words only (unrelated speech, as most HowTo100M narration
// is). Train and test sets of one seed share A (streams 0 and 1 draw different clips).
struct SyntheticClipTextOptions {
  int64_t clips = 4000, frames = 8, feature_dim = 128, vocab = 500, words = 8, candidates = 4;
  int64_t signature_words = 4;
  float noise = 0.5f;
  int64_t clips_per_shard = 1000;
  uint64_t seed = 0, stream = 0;
};
void write_synthetic_clip_text(const std::string& dir, const SyntheticClipTextOptions& options);

}  // namespace tessera::data
