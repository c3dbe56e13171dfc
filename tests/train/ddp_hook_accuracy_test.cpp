// The bar for gradient compression: DDP training of the MLP on Fashion-MNIST with 2 worker
// processes still reaches >= 88% test accuracy with the fp16, bf16 and PowerSGD comm hooks. Real
// data, real processes, through `tessera train --nproc 2` (about 20 s each on 2 cores). Named
// "LongTier": the sanitizer stages of scripts/test.sh skip it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unistd.h>

namespace tessera {
namespace {

namespace fs = std::filesystem;

class LongTierHookAccuracy : public ::testing::TestWithParam<std::string> {};

TEST_P(LongTierHookAccuracy, MlpOnFashionMnistReaches88Percent) {
  const std::string hook = GetParam();
  ASSERT_TRUE(fs::exists("/usr/share/datasets/fashion-mnist"))
      << "Fashion-MNIST is missing: scripts/setup.sh installs dataset-fashion-mnist";
  fs::path out = fs::path(::testing::TempDir()) / ("tessera_hook_" + hook + "_" + std::to_string(::getpid()));
  fs::remove_all(out);
  std::string log = out.string() + ".log";
  std::string cmd = std::string(TESSERA_BINARY) + " train " + TESSERA_SOURCE_DIR + "/examples/mlp.toml --nproc 2" +
                    " --set train.epochs=4 --set train.batch_size=64 --set distributed.comm_hook=" + hook +
                    " --set train.output_dir=" + out.string() + " > " + log + " 2>&1";
  int status = std::system(cmd.c_str());
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, 0) << cmd << "\n" << text;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("final test accuracy ([0-9.]+)%"))) << text;
  double accuracy = std::stod(m[1]);
  std::printf("%s: %.2f%% test accuracy\n", hook.c_str(), accuracy);
  EXPECT_GE(accuracy, 88.0) << hook;
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Hooks, LongTierHookAccuracy, ::testing::Values("fp16", "bf16", "powersgd"));

}  // namespace
}  // namespace tessera
