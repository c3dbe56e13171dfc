// DDP on GPUs through the CPU backends (`tessera train --nproc N --device cuda`): each rank's
// parameters on its GPU (local rank r on cuda:(r mod GPUs), so on a one-GPU machine every rank shares
// cuda:0), gradients copied into host buckets, all-reduced by shm or gloo, the averages copied back.
// Real processes; the result equals one process on the global batch, as on the CPU
// (ddp_training_process_test.cpp), within 1e-4: the products on the GPU split their sums by batch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tessera/io/checkpoint.h"
#include "testing/cuda_device.h"
#include "testing/state_compare.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

std::string write_config(const std::string& dir) {
  const std::string path = dir + "/config.toml";
  std::ofstream(path) << "[model]\nname = \"mlp\"\nhidden = [32, 16]\n"
                      << "[data]\ndataset = \"synthetic\"\nsamples = 1024\ntest_samples = 128\nclasses = 4\n"
                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.01\n"
                      << "[train]\nepochs = 1\nmax_steps = 20\nthreads = 1\nlog_every = 100\ndevice = \"cuda\"\n";
  return path;
}

nn::StateDict train(const std::string& config, const std::string& out, int nproc, int batch, const std::string& extra = "") {
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc " + std::to_string(nproc) +
                          " --set train.batch_size=" + std::to_string(batch) + " --set train.output_dir=" + out + " " +
                          extra + " > " + out + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream log(out + ".log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(status, 0) << cmd << "\n" << text;
  return io::load_checkpoint(out + "/checkpoints").model.tensors;
}

TEST(CudaDdpTraining, TwoProcessesOnGpusEqualOneProcess) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const std::string dir = tessera::testing::fresh_dir("cuda_ddp", "shm");
  const std::string config = write_config(dir);
  const nn::StateDict single = train(config, dir + "/single", 1, 32);
  const nn::StateDict shm = train(config, dir + "/shm", 2, 16);
  EXPECT_LT(tessera::testing::max_state_difference(single, shm), 1e-4);
  const nn::StateDict gloo = train(config, dir + "/gloo", 2, 16, "--set distributed.backend=gloo");
  EXPECT_LT(tessera::testing::max_state_difference(single, gloo), 1e-4);
}

}  // namespace
}  // namespace tessera
