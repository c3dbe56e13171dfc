// A checkpoint saved onto a full disk (a 1 MiB tmpfs, filled up): the save fails with an error that
// says so and names the checkpoint still intact, leaves no half-written step behind, and `latest`
// still loads. Needs root (mount); skipped with the reason otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/io/checkpoint.h"
#include "tessera/ops/ops.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointDiskFull, AFullDiskFailsTheSaveAndKeepsThePreviousCheckpoint) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  const std::string dir = tessera::testing::fresh_dir("ckpt", "diskfull");
  struct Mount {
    std::string at;
    bool mounted = false;
    ~Mount() {
      if (mounted) std::system(("umount " + at + " 2>/dev/null").c_str());
    }
  } mount{dir};
  if (std::system(("mount -t tmpfs -o size=1m tmpfs " + dir + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "could not mount a tmpfs at " << dir;
  mount.mounted = true;

  io::SafetensorsFile model, trainer;
  model.tensors.emplace_back("w", full({64 * 1024}, 1.0f));  // 256 KiB
  model.metadata["format"] = "pt";
  trainer.metadata["tessera.step"] = "1";
  const std::string checkpoints = dir + "/checkpoints";
  const std::string first = io::save_checkpoint(checkpoints, 1, model, trainer, 2, "run-a");
  // Leave about 100 KiB: not enough for the next step's 256 KiB.
  {
    std::ofstream filler(dir + "/filler", std::ios::binary);
    std::vector<char> block(4096, 'x');
    while (fs::space(dir).available > 100 * 1024 && filler.write(block.data(), block.size())) filler.flush();
  }
  try {
    io::save_checkpoint(checkpoints, 2, model, trainer, 2, "run-a");
    FAIL() << "a save onto a full disk succeeded";
  } catch (const IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("could not write step 2"), std::string::npos) << what;
    EXPECT_NE(what.find("the previous checkpoint, " + first + ", is intact"), std::string::npos) << what;
  }
  EXPECT_EQ(io::latest_checkpoint(checkpoints), first);
  for (const auto& entry : fs::directory_iterator(checkpoints))
    EXPECT_EQ(entry.path().filename().string().find("step-00000002"), std::string::npos) << entry.path();
  io::CheckpointFiles loaded = io::load_checkpoint(checkpoints);
  EXPECT_EQ(loaded.path, first);
  EXPECT_EQ(loaded.model.tensors.at(0).second.numel(), 64 * 1024);
}

}  // namespace
}  // namespace tessera
