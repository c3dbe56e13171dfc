// Mixed precision's accuracy bar: a model trained with train.precision = "bf16" or "fp16" reaches
// float32's test accuracy within 0.3 points on Fashion-MNIST. Each precision's accuracy is the mean
// over seeds 0, 1 and 2 (one seed's accuracy moves by up to 0.6 points between seeds here, and by up
// to 0.25 between precisions at one seed), and every run is bitwise reproducible on this machine
// (fixed seed and thread count), so the comparison gives the same answer each time it runs.
// Real data, `tessera train` from the command line. Named "LongTier": the sanitizer stages skip it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

double final_accuracy(const std::string& model, const std::string& precision, int seed, int epochs,
                      const std::string& dir) {
  const std::string out = dir + "/" + model + "-" + precision + "-" + std::to_string(seed);
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + TESSERA_SOURCE_DIR + "/examples/" + model +
                          ".toml --set train.precision=" + precision + " --set train.seed=" + std::to_string(seed) +
                          " --set train.epochs=" + std::to_string(epochs) + " --set train.threads=2" +
                          " --set train.log_every=100000 --set train.output_dir=" + out + " > " + out + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(out + ".log");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(status, 0) << cmd << "\n" << text;
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("final test accuracy ([0-9.]+)%"))) {
    ADD_FAILURE() << text;
    return 0;
  }
  return std::stod(m[1]);
}

void expect_float32_accuracy_within_a_third_of_a_point(const std::string& model, int epochs,
                                                        const std::vector<std::string>& precisions) {
  ASSERT_TRUE(fs::exists("/usr/share/datasets/fashion-mnist"))
      << "Fashion-MNIST is missing: scripts/setup.sh installs dataset-fashion-mnist";
  const std::string dir = tessera::testing::fresh_dir("mixed-precision-accuracy", model);
  std::map<std::string, double> mean;
  for (const std::string& precision : precisions) {
    for (int seed = 0; seed < 3; ++seed) {
      const double accuracy = final_accuracy(model, precision, seed, epochs, dir);
      std::printf("%s %s seed %d: %.2f%%\n", model.c_str(), precision.c_str(), seed, accuracy);
      mean[precision] += accuracy / 3;
    }
  }
  for (const std::string& precision : precisions) {
    std::printf("%s mean test accuracy in %s: %.2f%%\n", model.c_str(), precision.c_str(), mean[precision]);
    EXPECT_GE(mean[precision], mean["fp32"] - 0.3) << model << " in " << precision;
  }
  fs::remove_all(dir);
}

TEST(LongTierMixedPrecision, MlpReachesTheFloat32AccuracyWithinAThirdOfAPoint) {
  // examples/mlp.toml as it is, ~5 s a run. Measured: fp32 89.02%, bf16 88.93%, fp16 88.99%.
  expect_float32_accuracy_within_a_third_of_a_point("mlp", 5, {"fp32", "bf16", "fp16"});
}

TEST(LongTierMixedPrecision, CnnReachesTheFloat32AccuracyWithinAThirdOfAPoint) {
  // One epoch of examples/cnn.toml, ~17 s a run. Measured: fp32 88.59%, bf16 88.52% (and fp16 88.57%,
  // left out here for time: fp16 convolutions run at float32's speed, and the MLP checks fp16).
  expect_float32_accuracy_within_a_third_of_a_point("cnn", 1, {"fp32", "bf16"});
}

}  // namespace
}  // namespace tessera
