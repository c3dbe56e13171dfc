// Image folders (data/image_folder.h): PNGs written and read back, classes by folder name, decoding
// per batch, and corrupt or mismatched images refused naming the file; then trained through the
// trainer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/data/image_folder.h"
#include "tessera/ops/ops.h"
#include "tessera/train/config.h"
#include "tessera/train/run.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

// Class 0: horizontal stripes, 1: vertical stripes, 2: a bright centre; each with noise.
Tensor pattern(int cls, int64_t side, Generator& gen) {
  std::vector<float> v(static_cast<size_t>(side * side));
  for (int64_t y = 0; y < side; ++y)
    for (int64_t x = 0; x < side; ++x) {
      const bool on = cls == 0 ? y % 2 == 0 : cls == 1 ? x % 2 == 0 : (std::abs(x - side / 2) < 2 && std::abs(y - side / 2) < 2);
      v[static_cast<size_t>(y * side + x)] = on ? 0.8f : 0.2f;
    }
  return add(from_vector(v, {1, side, side}), mul(rand({1, side, side}, gen), 0.2f));
}

void write_folder(const std::string& root, int per_class, int64_t side, uint64_t seed) {
  Generator gen(seed);
  const char* names[] = {"horizontal", "vertical", "centre"};
  for (int c = 0; c < 3; ++c) {
    std::filesystem::create_directories(root + "/" + names[c]);
    for (int i = 0; i < per_class; ++i) write_png(root + "/" + names[c] + "/" + std::to_string(i) + ".png", pattern(c, side, gen));
  }
}

TEST(ImageFolder, PngsRoundTripAndClassesFollowFolderNames) {
  const std::string dir = tessera::testing::fresh_dir("image_folder", "round_trip");
  write_folder(dir, 4, 8, 1);
  std::ofstream(dir + "/vertical/readme.txt") << "not an image";
  auto set = load_image_folder(dir);
  EXPECT_EQ(set->classes(), (std::vector<std::string>{"centre", "horizontal", "vertical"}));
  EXPECT_EQ(set->size(), 12);
  EXPECT_EQ(set->image_shape(), (Shape{1, 8, 8}));
  Batch b = set->get_batch({0, 11});
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 1, 8, 8}));
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{0, 2}));
  // 8-bit storage: values come back within half a step.
  Generator gen(5);
  Tensor image = pattern(1, 6, gen);
  write_png(dir + "/one.png", image);
  const std::vector<float> a = image.to_vector<float>(), r = read_png(dir + "/one.png").to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], r[i], 0.5f / 255 + 1e-6f);
  EXPECT_EQ(read_png(dir + "/one.png", 3).shape(), (Shape{3, 6, 6}));  // gray read as RGB
}

TEST(ImageFolder, CorruptOrMismatchedImagesNameTheFile) {
  const std::string dir = tessera::testing::fresh_dir("image_folder", "bad");
  write_folder(dir, 2, 8, 2);
  Generator gen(3);
  write_png(dir + "/centre/big.png", pattern(2, 10, gen));
  auto set = load_image_folder(dir);
  try {
    set->get_batch({0, 1, 2});  // centre/0, centre/1, centre/big
    ADD_FAILURE() << "a 10x10 image in an 8x8 folder was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("big.png is [1, 10, 10]"), std::string::npos) << e.what();
  }
  std::filesystem::remove(dir + "/centre/big.png");
  std::filesystem::resize_file(dir + "/centre/1.png", 40);  // truncated
  EXPECT_THROW(load_image_folder(dir)->get_batch({1}), IoError);
  std::ofstream(dir + "/centre/0.png") << "not a png at all";
  try {
    load_image_folder(dir);
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("centre/0.png"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_image_folder(dir + "/nothing"), IoError);
}

TEST(ImageFolder, TheTrainerLearnsAFolderOfPngs) {
  const std::string dir = tessera::testing::fresh_dir("image_folder", "train");
  write_folder(dir + "/images/train", 40, 8, 10);
  write_folder(dir + "/images/test", 10, 8, 11);
  train::TrainConfig c = train::parse_config(
      "[model]\nname = \"mlp\"\nhidden = [32]\ninput_dim = 64\n[data]\ndataset = \"image-folder\"\ndir = \"" + dir +
          "/images\"\nclasses = 3\n[optimizer]\nname = \"adam\"\nlr = 0.01\n"
          "[train]\nepochs = 5\nbatch_size = 16\nthreads = 1\nlog_every = 1000\noutput_dir = \"" + dir + "/run\"\n",
      "test");
  train::RunOutcome out = train::run(c, {.stop_on_signals = false});
  ASSERT_TRUE(out.fit.last_eval);
  EXPECT_GE(out.fit.last_eval->accuracy, 0.9);
  c.model.input_dim = 100;
  EXPECT_THROW(train::run(c, {.stop_on_signals = false}), ValueError);  // 8x8 images, input_dim 100
}

}  // namespace
}  // namespace tessera::data
