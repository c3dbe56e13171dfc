// The sharded checkpoint format (io/checkpoint_manifest.h, piece_writer.h, piece_reader.h): regions
// and their runs, pieces written by several "ranks" of one layout read back at another, a rank reading
// only the pieces it needs, and every kind of damage refused with the tensor and the file named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/io/checkpoint.h"
#include "tessera/io/checkpoint_manifest.h"
#include "tessera/io/piece_reader.h"
#include "tessera/io/piece_writer.h"
#include "tessera/ops/ops.h"
#include "testing/temp_dir.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

// 0, 1, 2, ... in a tensor of `shape`.
Tensor counting(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return from_vector(v, shape);
}

std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }

TEST(CheckpointRegions, BoxesBecomeRunsAndTrailingWholeDimensionsMerge) {
  // Columns [1, 3) of a 3 × 4 matrix: one run per row.
  std::vector<RegionRun> runs = region_runs(Region::box({0, 1}, {3, 2}), {3, 4});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].global, 5);
  EXPECT_EQ(runs[1].local, 2);
  EXPECT_EQ(runs[1].count, 2);
  // Rows [1, 3) whole: one run.
  runs = region_runs(Region::box({1, 0}, {2, 4}), {3, 4});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].global, 4);
  EXPECT_EQ(runs[0].count, 8);
  // A flat range, a scalar, and an empty box.
  EXPECT_EQ(region_runs(Region::flat_range(3, 9), {3, 4}).at(0).count, 6);
  EXPECT_EQ(region_runs(Region::whole({}), {}).size(), 1u);
  EXPECT_TRUE(region_runs(Region::box({0, 2}, {3, 0}), {3, 4}).empty());
  EXPECT_THROW(region_runs(Region::box({0, 3}, {3, 2}), {3, 4}), ValueError);
  EXPECT_THROW(region_runs(Region::flat_range(10, 13), {3, 4}), ValueError);
}

// Two "ranks" of a tensor-parallel layout: rank r holds columns [2r, 2r + 2) of w (4 × 4) and the
// ZeRO-like flat half r of b (6); rank 0 also the scalar step.
void save_two_ranks(const std::string& dir) {
  const Tensor w = counting({4, 4}), b = counting({6}) * 10.0f;
  for (int r = 0; r < 2; ++r) {
    std::vector<SavePiece> pieces{
        {"model/w", {4, 4}, Region::box({0, 2 * r}, {4, 2}), w.slice(1, 2 * r, 2 * r + 2)},
        {"model/b", {6}, Region::flat_range(3 * r, 3 * r + 3), b.slice(0, 3 * r, 3 * r + 3)}};
    if (r == 0) pieces.push_back({"optimizer/step", {}, Region::whole({}), from_vector(std::vector<int64_t>{7}, {})});
    write_rank_pieces(dir, r, 2, pieces);
  }
  write_manifest(dir, 2);
}

TEST(CheckpointPieces, SavedAtOneLayoutReadAtAnother) {
  const std::string dir = tessera::testing::fresh_dir("pieces", "layouts") + "/pieces";
  save_two_ranks(dir);
  EXPECT_FALSE(fs::exists(dir + "/rank-0-of-2.json"));  // the records went into the manifest
  PieceReader reader(dir);
  EXPECT_EQ(reader.manifest().writers, 2);
  EXPECT_EQ(values(reader.read_whole("model/w")), values(counting({4, 4})));
  // Rows [1, 3) (another layout's shard: across both ranks' column pieces).
  EXPECT_EQ(values(reader.read("model/w", Region::box({1, 0}, {2, 4}))), values(counting({4, 4}).slice(0, 1, 3)));
  // b's elements [2, 5): the end of rank 0's piece and the start of rank 1's.
  EXPECT_EQ(values(reader.read("model/b", Region::flat_range(2, 5))), (std::vector<float>{20, 30, 40}));
  EXPECT_EQ(reader.read_whole("optimizer/step").item<int64_t>(), 7);
  const WholeState whole = read_whole_state(reader);
  EXPECT_EQ(whole.model.size(), 2u);
  ASSERT_EQ(whole.optimizer.size(), 1u);
  EXPECT_EQ(whole.optimizer[0].first, "step");
}

TEST(CheckpointPieces, ARankReadsOnlyThePiecesThatOverlapItsPart) {
  const std::string dir = tessera::testing::fresh_dir("pieces", "bytes") + "/pieces";
  save_two_ranks(dir);
  PieceReader reader(dir);
  reader.read("model/w", Region::box({0, 2}, {4, 2}));  // rank 1's columns exactly
  EXPECT_EQ(reader.bytes_read(), 4u * 2 * sizeof(float));
  reader.read("model/b", Region::flat_range(0, 2));  // inside rank 0's half
  EXPECT_EQ(reader.bytes_read(), 4u * 2 * sizeof(float) + 3 * sizeof(float));
}

// Each damage is refused with the tensor and the file named.
void expect_refused(const std::string& dir, const std::string& tensor, const std::string& file, const std::string& why) {
  try {
    PieceReader reader(dir);
    reader.verify_all();
    ADD_FAILURE() << why << " was accepted";
  } catch (const IoError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find(tensor), std::string::npos) << why << ": " << text;
    EXPECT_NE(text.find(file), std::string::npos) << why << ": " << text;
  }
}

TEST(CheckpointPieces, DamageIsRefusedNamingTheTensorAndTheFile) {
  const std::string root = tessera::testing::fresh_dir("pieces", "damage");
  auto fresh = [&](const std::string& name) {
    const std::string dir = root + "/" + name;
    save_two_ranks(dir);
    return dir;
  };
  // A piece file missing.
  std::string dir = fresh("missing");
  fs::remove(dir + "/rank-1-of-2.safetensors");
  expect_refused(dir, "model/w", "rank-1-of-2.safetensors", "a missing piece file");
  // A truncated piece.
  dir = fresh("truncated");
  fs::resize_file(dir + "/rank-1-of-2.safetensors", fs::file_size(dir + "/rank-1-of-2.safetensors") - 4);
  expect_refused(dir, "model/b", "rank-1-of-2.safetensors", "a truncated piece");
  // A flipped byte (the last piece of rank 1's file: b's second half).
  dir = fresh("flipped");
  tessera::testing::flip_last_byte(dir + "/rank-1-of-2.safetensors");
  expect_refused(dir, "model/b", "rank-1-of-2.safetensors", "a flipped byte");
  // A manifest naming a piece nobody wrote.
  dir = fresh("unwritten");
  std::string manifest = tessera::testing::read_text(dir + "/manifest.json");
  const size_t at = manifest.find("\"key\": \"model/b\"");
  ASSERT_NE(at, std::string::npos) << manifest;
  manifest.replace(at, 16, "\"key\": \"model/c\"");
  std::ofstream(dir + "/manifest.json") << manifest;
  expect_refused(dir, "model/b", "rank-0-of-2.safetensors", "a piece nobody wrote");
  // A rank's pieces left out of the manifest: the tensors they held are not covered.
  dir = root + "/uncovered";
  write_rank_pieces(dir, 0, 1, {{"model/w", {4, 4}, Region::box({0, 0}, {4, 2}), counting({4, 2})}});
  try {
    write_manifest(dir, 1);
    ADD_FAILURE() << "a tensor half covered was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("model/w"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("in no piece"), std::string::npos) << e.what();
  }
  // A rank that never wrote: the manifest is never written.
  dir = root + "/absent";
  write_rank_pieces(dir, 0, 2, {});
  EXPECT_THROW(write_manifest(dir, 2), IoError);
  EXPECT_FALSE(fs::exists(dir + "/manifest.json"));
}

// A step holding pieces: saved with a reload (its tensors assembled whole before it counts), found as
// sharded by load_checkpoint, and refused by verify_checkpoint once a piece is damaged.
TEST(CheckpointPieces, AStepWithPiecesIsVerifiedAndReloadedBeforeItCounts) {
  const std::string root = tessera::testing::fresh_dir("pieces", "step");
  save_two_ranks(root + "/.pieces");
  const std::string step = save_checkpoint(root + "/checkpoints", 3, {}, {}, 2, "run-a", root + "/.pieces", Verify::kReload);
  EXPECT_FALSE(fs::exists(root + "/.pieces"));  // moved into the step
  EXPECT_EQ(load_checkpoint(root + "/checkpoints").pieces, step + "/pieces");
  EXPECT_NO_THROW(verify_checkpoint(step, Verify::kReload));
  tessera::testing::flip_last_byte(step + "/pieces/rank-1-of-2.safetensors");
  try {
    verify_checkpoint(step, Verify::kReload);
    ADD_FAILURE() << "a damaged piece verified";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank-1-of-2.safetensors"), std::string::npos) << e.what();
  }
  // A save whose pieces are damaged never becomes a step.
  save_two_ranks(root + "/.pieces-bad");
  tessera::testing::flip_last_byte(root + "/.pieces-bad/rank-0-of-2.safetensors");
  EXPECT_THROW(save_checkpoint(root + "/checkpoints", 4, {}, {}, 2, "run-a", root + "/.pieces-bad"), IoError);
  EXPECT_EQ(latest_checkpoint_step(root + "/checkpoints"), 3);
}

TEST(CheckpointPieces, OverlappingPiecesAreRefused) {
  const std::string dir = tessera::testing::fresh_dir("pieces", "overlap") + "/pieces";
  const Tensor w = counting({4, 4});
  write_rank_pieces(dir, 0, 2, {{"model/w", {4, 4}, Region::box({0, 0}, {3, 4}), w.slice(0, 0, 3)}});
  write_rank_pieces(dir, 1, 2, {{"model/w", {4, 4}, Region::box({2, 0}, {2, 4}), w.slice(0, 2, 4)}});
  try {
    write_manifest(dir, 2);
    ADD_FAILURE() << "overlapping pieces were accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("two pieces"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::io
