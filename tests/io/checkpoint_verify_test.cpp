// Self-verifying checkpoints (io/checkpoint.h): every save is read back before it becomes a step
// directory; verify_checkpoint names the file and tensor of a flipped byte, a truncated file or a
// missing one; `--resume auto` (newest_verified_checkpoint) skips a checkpoint that does not read
// back, and never starts afresh over checkpoints that are all bad.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/io/checkpoint.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"
#include "testing/temp_dir.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;
using tessera::testing::expect_error;

SafetensorsFile model_file(float value) {
  SafetensorsFile f;
  f.tensors = {{"fc.weight", full({64, 32}, value)}, {"fc.bias", full({64}, value)}};
  return f;
}

SafetensorsFile trainer_file(int64_t step) {
  SafetensorsFile f;
  f.tensors = {{"0.exp_avg", zeros({64, 32})}};
  f.metadata = {{"step", std::to_string(step)}};
  return f;
}

std::string save(const std::string& dir, int64_t step) {
  return save_checkpoint(dir, step, model_file(static_cast<float>(step)), trainer_file(step), 5, "run-a");
}

void flip_last_byte(const fs::path& file) { tessera::testing::flip_last_byte(file.string()); }

TEST(CheckpointVerify, AGoodSaveReadsBackAndAFlippedByteNamesTheFileAndTensor) {
  const std::string dir = tessera::testing::fresh_dir("checkpoint_verify", "flip");
  const std::string step = save(dir, 3);
  EXPECT_NO_THROW(verify_checkpoint(step));
  flip_last_byte(fs::path(step) / "model.safetensors");  // the last tensor's last byte
  expect_error<IoError>([&] { verify_checkpoint(step); }, {"model.safetensors", "does not read back", "is corrupt"});
}

TEST(CheckpointVerify, ATruncatedOrMissingFileIsNamed) {
  const std::string dir = tessera::testing::fresh_dir("checkpoint_verify", "truncated");
  const std::string step = save(dir, 4);
  const fs::path trainer = fs::path(step) / "trainer.safetensors";
  fs::resize_file(trainer, fs::file_size(trainer) - 100);
  expect_error<IoError>([&] { verify_checkpoint(step); }, {"trainer.safetensors", "does not read back"});
  fs::remove(trainer);
  expect_error<IoError>([&] { verify_checkpoint(step); }, {"trainer.safetensors", "is missing"});
}

TEST(CheckpointVerify, ResumeAutoSkipsWhatDoesNotReadBack) {
  const std::string dir = tessera::testing::fresh_dir("checkpoint_verify", "auto");
  EXPECT_EQ(newest_verified_checkpoint(dir), "");  // nothing saved: a fresh start
  const std::string first = save(dir, 10), second = save(dir, 20), third = save(dir, 30);
  EXPECT_EQ(newest_verified_checkpoint(dir), third);
  flip_last_byte(fs::path(third) / "model.safetensors");
  std::vector<std::string> skipped;
  EXPECT_EQ(newest_verified_checkpoint(dir, &skipped), second);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step-00000030"), std::string::npos) << skipped[0];
  flip_last_byte(fs::path(second) / "trainer.safetensors");
  flip_last_byte(fs::path(first) / "model.safetensors");
  // Checkpoints exist but none is whole: an error naming each, never a silent fresh start.
  expect_error<IoError>([&] { newest_verified_checkpoint(dir); },
                        {"no checkpoint", "step-00000030", "step-00000020", "step-00000010"});
}

TEST(CheckpointVerify, StepDirectoriesAreNamedByStep) {
  EXPECT_EQ(fs::path(step_directory("/x/checkpoints", 42)).filename(), "step-00000042");
}

}  // namespace
}  // namespace tessera::io
