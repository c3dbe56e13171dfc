// Clip features and narrations (data/clip_text.h): the synthetic writer and the reader agree, the
// planted correspondence is there, and corrupt files are refused naming the file and the line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/data/clip_text.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops/ops.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

SyntheticClipTextOptions small() {
  SyntheticClipTextOptions o;
  o.clips = 25, o.frames = 3, o.feature_dim = 6, o.vocab = 50, o.words = 5, o.candidates = 3;
  o.signature_words = 2, o.clips_per_shard = 10, o.seed = 5;
  return o;
}

std::string written(const std::string& name) {
  const std::string dir = tessera::testing::fresh_dir("clip_text", name);
  write_synthetic_clip_text(dir, small());
  return dir;
}

void expect_refused(const std::string& dir, const std::string& expected) {
  try {
    load_clip_text(dir);
    ADD_FAILURE() << "loaded a corrupt set; expected: " << expected;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::trunc) << text; }

TEST(ClipText, TheSyntheticSetRoundTripsThroughShards) {
  const std::string dir = written("round_trip");
  EXPECT_TRUE(std::filesystem::exists(dir + "/features-00002.safetensors"));  // 25 clips in shards of 10
  auto set = load_clip_text(dir);
  EXPECT_EQ(set->size(), 25);
  Batch b = set->get_batch({0, 24});
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 3, 6}));
  EXPECT_EQ(b.targets.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(b.targets.dtype(), DType::Int64);
  // Clip 24 is the last of the third shard: the shards were read in order.
  io::SafetensorsFile last = io::load_safetensors(dir + "/features-00002.safetensors");
  EXPECT_EQ(slice(b.inputs, 0, 1, 2).contiguous().to_vector<float>(),
            slice(last.tensors[0].second, 0, 4, 5).contiguous().to_vector<float>());
  EXPECT_EQ(set->aligned_narrations().shape(), (Shape{25, 5}));
}

TEST(ClipText, AlignedNarrationsShareWordsWithTheirClipOnly) {
  // The planted correspondence: a clip's aligned narration holds its 2 signature words; another
  // clip's aligned narration shares them rarely (50 words).
  auto set = load_clip_text(written("planted"));
  const std::vector<int64_t> q = set->aligned_narrations().to_vector<int64_t>();
  auto shared = [&](int64_t a, int64_t b) {
    int n = 0;
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 5; ++j) n += q[a * 5 + i] == q[b * 5 + j];
    return n;
  };
  int64_t same = 0, other = 0;
  for (int64_t a = 0; a < 25; ++a) {
    same += shared(a, a);
    other += shared(a, (a + 1) % 25);
  }
  EXPECT_GE(same, 25 * 5);  // each word matches itself
  EXPECT_LT(other, same / 2);
}

TEST(ClipText, ANarrationLineThatIsWrongIsNamed) {
  const std::string dir = written("bad_line");
  std::string lines = tessera::testing::read_text(dir + "/narrations.jsonl");
  write(dir + "/narrations.jsonl", lines + "{\"clip\": 3, \"words\": [1, 999]}\n");
  expect_refused(dir, "narrations.jsonl:76: word id 999 is outside [1, 50)");
  write(dir + "/narrations.jsonl", lines + "not json\n");
  expect_refused(dir, "narrations.jsonl:76: not a JSON object");
  write(dir + "/narrations.jsonl", lines.substr(0, lines.rfind('\n', lines.size() - 2) + 1));  // clip 24 loses one
  expect_refused(dir, "clip 24 has 2 narrations, meta.json says 3");
}

TEST(ClipText, MetaAndShardsThatDisagreeAreRefused) {
  const std::string dir = written("bad_meta");
  const std::string meta = tessera::testing::read_text(dir + "/meta.json");
  write(dir + "/meta.json", "{\"frames\": 3}");
  expect_refused(dir, "needs an integer \"feature_dim\"");
  write(dir + "/meta.json", "{\"frames\": 3, \"feature_dim\": 7, \"vocab\": 50, \"words\": 5, \"candidates\": 3, \"clips\": 25}");
  expect_refused(dir, "meta.json says float32 (n, 3, 7)");
  write(dir + "/meta.json", "{\"frames\": 3, \"feature_dim\": 6, \"vocab\": 50, \"words\": 5, \"candidates\": 3, \"clips\": 26}");
  expect_refused(dir, "the shards hold 25 clips, meta.json says 26");
  write(dir + "/meta.json", "{\"frames\": -1, \"feature_dim\": 6, \"vocab\": 50, \"words\": 5, \"candidates\": 3, \"clips\": 25}");
  expect_refused(dir, "\"frames\" = -1 is outside");
  write(dir + "/meta.json", meta);
  std::filesystem::resize_file(dir + "/features-00001.safetensors", 100);  // a truncated shard
  expect_refused(dir, "features-00001.safetensors");
}

}  // namespace
}  // namespace tessera::data
