// tessera checkpoint inspect|verify|convert, run as the CLI: the listing names the step and every
// tensor with its shape and checksum; verify passes a whole checkpoint and fails a corrupt one naming
// the file and tensor; convert writes the model as one safetensors file equal to the checkpoint's
// model, bit for bit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tessera/io/checkpoint.h"
#include "testing/expect.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct Output {
  int status;
  std::string text;
};

Output run(const std::string& args, const std::string& log) {
  const std::string cmd = std::string(TESSERA_BINARY) + " " + args + " > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, tessera::testing::read_text(log)};
}

TEST(CheckpointCommand, InspectVerifyAndConvertATrainedRun) {
  const std::string dir = tessera::testing::fresh_dir("checkpoint_command", "run");
  const std::string config = dir + "/config.toml";
  std::ofstream(config) << "[model]\nname = \"mlp\"\nhidden = [16]\n"
                        << "[data]\ndataset = \"synthetic\"\nsamples = 256\ntest_samples = 64\nclasses = 4\n"
                        << "[train]\nepochs = 1\nbatch_size = 32\nthreads = 1\nlog_every = 100\noutput_dir = \"" << dir
                        << "/run\"\n";
  ASSERT_EQ(run("train " + config, dir + "/train.log").status, 0);

  const Output inspect = run("checkpoint inspect " + dir + "/run", dir + "/inspect.log");
  ASSERT_EQ(inspect.status, 0) << inspect.text;
  for (const char* expected : {"step-00000008", "step 8", "local strategy", "1.weight", "[16, 784]", "crc32:"})
    EXPECT_NE(inspect.text.find(expected), std::string::npos) << expected << " in\n" << inspect.text;

  const Output good = run("checkpoint verify " + dir + "/run", dir + "/verify.log");
  EXPECT_EQ(good.status, 0) << good.text;
  EXPECT_NE(good.text.find("reads back whole"), std::string::npos) << good.text;

  const std::string out = dir + "/model.safetensors";
  ASSERT_EQ(run("checkpoint convert " + dir + "/run -o " + out, dir + "/convert.log").status, 0);
  const io::SafetensorsFile converted = io::load_safetensors(out);
  const io::CheckpointFiles saved = io::load_checkpoint(dir + "/run");
  ASSERT_EQ(converted.tensors.size(), saved.model.tensors.size());
  for (size_t i = 0; i < saved.model.tensors.size(); ++i) {
    EXPECT_EQ(converted.tensors[i].first, saved.model.tensors[i].first);
    EXPECT_TRUE(tessera::testing::bitwise_equal(converted.tensors[i].second, saved.model.tensors[i].second));
  }

  // One byte flipped in the model file: verify fails, naming the file.
  tessera::testing::flip_last_byte((fs::path(saved.path) / "model.safetensors").string());
  const Output bad = run("checkpoint verify " + dir + "/run", dir + "/verify_bad.log");
  EXPECT_EQ(bad.status, 1) << bad.text;
  EXPECT_NE(bad.text.find("model.safetensors"), std::string::npos) << bad.text;
  EXPECT_NE(bad.text.find("corrupt"), std::string::npos) << bad.text;
}

}  // namespace
}  // namespace tessera
