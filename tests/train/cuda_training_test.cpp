// Training on a GPU (train.device = "cuda", tessera train --device) against the same run on the CPU:
// the MLP and the GPT train 200 steps (the CNN 100) with per-step losses within tolerance of the CPU's, and a
// checkpoint written from the GPU resumes on the CPU (and a CPU one on the GPU) with the values
// bit for bit. The devices sum in different orders (cuBLASLt's products, the block reductions), so
// the runs drift apart by rounding only: 1e-3 relative on each step's loss over 200 SGD steps
// (measured on the CPU between oneDNN and OpenBLAS products, the same kind of difference: 2e-5).
// Dropout is off: the GPU draws its masks from its own generator (docs/gpu.md).
// Suites named Cuda* carry the ctest label gpu and skip without a device; the CPU-side refusals
// run everywhere (TrainDevice).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <cstdlib>

#include "tessera/dist/launcher/env.h"
#include "tessera/io/atomic_file.h"
#include "tessera/train/device_choice.h"
#include "tessera/train/trainer.h"
#include "testing/cuda_device.h"
#include "testing/expect.h"
#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using tessera::testing::expect_error;

std::string fresh_dir(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("tessera_cuda_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

TrainConfig mlp_config(const std::string& out, const std::string& device) {
  TrainConfig c;
  c.model.name = "mlp";
  c.model.hidden = {64, 32};
  c.model.dropout = 0.0;
  c.data.dataset = "synthetic";
  c.data.samples = 1600;
  c.data.test_samples = 256;
  c.data.classes = 4;
  c.optimizer.name = "sgd";
  c.optimizer.lr = 0.05;
  c.optimizer.momentum = 0.9;
  c.train.epochs = 4;
  c.train.batch_size = 32;  // 50 steps an epoch: 200 steps
  c.train.log_every = 1000;
  c.train.output_dir = out;
  c.train.device = device;
  return c;
}

TrainConfig gpt_config(const std::string& corpus, const std::string& out, const std::string& device) {
  TrainConfig c;
  c.model.name = "transformer";
  c.model.layers = 2;
  c.model.heads = 4;
  c.model.embed_dim = 32;
  c.model.context = 16;
  c.model.dropout = 0.0;
  c.data.dataset = "text";
  c.data.path = corpus;
  c.data.val_fraction = 0.1;
  c.optimizer.name = "adamw";
  c.optimizer.lr = 1e-3;
  c.optimizer.eps = 1e-6;  // see model_parallel_trainer_test.cpp: rounding noise stays noise
  c.optimizer.clip_grad_norm = 1.0;
  c.train.epochs = 100;
  c.train.max_steps = 200;
  c.train.batch_size = 8;
  c.train.log_every = 1000;
  c.train.output_dir = out;
  c.train.device = device;
  return c;
}

std::vector<double> step_losses(const std::string& dir) {
  std::vector<double> out;
  std::istringstream in(io::read_file(dir + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "step") out.push_back(j["loss"].get<double>());
  }
  return out;
}

void expect_losses_close(const std::vector<double>& gpu, const std::vector<double>& cpu, double rtol) {
  ASSERT_EQ(gpu.size(), cpu.size());
  ASSERT_FALSE(cpu.empty());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], rtol * std::fabs(cpu[i])) << "step " << i + 1;
  EXPECT_LT(cpu.back(), cpu.front());  // and the runs learned something
}

TEST(CudaTraining, TheMlpTrainsAsOnTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const std::string cpu_dir = fresh_dir("mlp_cpu"), gpu_dir = fresh_dir("mlp_gpu");
  const FitResult cpu = Trainer(mlp_config(cpu_dir, "cpu")).fit();
  const FitResult gpu = Trainer(mlp_config(gpu_dir, "cuda")).fit();
  EXPECT_EQ(gpu.steps, 200);
  expect_losses_close(step_losses(gpu_dir), step_losses(cpu_dir), 1e-3);
  ASSERT_TRUE(cpu.last_eval && gpu.last_eval);
  EXPECT_NEAR(gpu.last_eval->loss, cpu.last_eval->loss, 1e-3 * cpu.last_eval->loss);
  EXPECT_NEAR(gpu.last_eval->accuracy, cpu.last_eval->accuracy, 2.0 / 256);  // at most 2 test samples differ
}

TEST(CudaTraining, TheCnnTrainsAsOnTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  auto cnn = [](const std::string& out, const std::string& device) {
    TrainConfig c = mlp_config(out, device);
    c.model.name = "cnn";
    c.model.hidden = {};
    c.data.classes = 10;  // the CNN's fixed classes
    c.data.samples = 800;
    c.train.epochs = 4;  // 25 steps an epoch: 100 steps
    return c;
  };
  const std::string cpu_dir = fresh_dir("cnn_cpu"), gpu_dir = fresh_dir("cnn_gpu");
  Trainer(cnn(cpu_dir, "cpu")).fit();
  const FitResult gpu = Trainer(cnn(gpu_dir, "cuda")).fit();
  EXPECT_EQ(gpu.steps, 100);
  expect_losses_close(step_losses(gpu_dir), step_losses(cpu_dir), 1e-3);
}

TEST(CudaTraining, TheGptTrainsAsOnTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const std::string data = fresh_dir("gpt_data"), cpu_dir = fresh_dir("gpt_cpu"), gpu_dir = fresh_dir("gpt_gpu");
  const std::string corpus = tessera::testing::write_corpus(data, 200);
  Trainer(gpt_config(corpus, cpu_dir, "cpu")).fit();
  const FitResult gpu = Trainer(gpt_config(corpus, gpu_dir, "cuda")).fit();
  EXPECT_EQ(gpu.steps, 200);
  expect_losses_close(step_losses(gpu_dir), step_losses(cpu_dir), 1e-3);
}

TEST(CudaTraining, CheckpointsMoveBetweenTheGpuAndTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  // 30 steps on the GPU, saved; the run resumed on the CPU starts from exactly the GPU's values.
  const std::string dir = fresh_dir("ckpt");
  TrainConfig on_gpu = mlp_config(dir, "cuda");
  on_gpu.train.max_steps = 30;
  Trainer gpu(on_gpu);
  gpu.fit();
  std::vector<std::vector<float>> saved;
  for (const Tensor& p : gpu.model().parameters()) {
    EXPECT_EQ(p.device(), cuda_device(0));
    saved.push_back(p.to_vector<float>());
  }
  TrainConfig on_cpu = mlp_config(dir, "cpu");
  on_cpu.train.max_steps = 30;
  Trainer cpu(on_cpu);
  cpu.resume();
  EXPECT_EQ(cpu.global_step(), 30);
  const std::vector<Tensor> params = cpu.model().parameters();
  ASSERT_EQ(params.size(), saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    EXPECT_EQ(params[i].device(), cpu_device());
    EXPECT_EQ(params[i].to_vector<float>(), saved[i]) << "parameter " << i;
  }
  // And back: the CPU's checkpoint resumed on the GPU, then trained on to the end.
  TrainConfig back = mlp_config(dir, "cuda");
  Trainer again(back);
  again.resume();
  for (size_t i = 0; i < saved.size(); ++i)
    EXPECT_EQ(again.model().parameters()[i].to_vector<float>(), saved[i]) << "parameter " << i;
  EXPECT_EQ(again.fit().steps, 200);
}

TEST(TrainDevice, PlainCudaGivesEachLocalRankItsOwnGpuRoundRobin) {
  EXPECT_EQ(device_for_rank("cpu", 3, 8), cpu_device());
  EXPECT_EQ(device_for_rank("cuda:5", 3, 8), cuda_device(5));  // a device named is the device taken
  EXPECT_EQ(device_for_rank("cuda", 3, 8), cuda_device(3));
  EXPECT_EQ(device_for_rank("cuda", 3, 2), cuda_device(1));    // more ranks than GPUs: shared
  EXPECT_EQ(device_for_rank("cuda", 3, 1), cuda_device(0));
  EXPECT_EQ(device_for_rank("cuda", std::nullopt, 4), cuda_device(0));  // not launched as a job
  EXPECT_EQ(device_for_rank("cuda", 2, 0), cuda_device(0));  // no GPU: cuda:0, whose use then says why
  EXPECT_THROW(device_for_rank("gpu", 0, 1), ValueError);
}

TEST(TrainDevice, TheLocalRankComesFromWhicheverLauncherStartedTheProcess) {
  const char* names[] = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"};
  for (const char* name : names) unsetenv(name);
  EXPECT_EQ(dist::launcher::local_rank_from_environment(), std::nullopt);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  EXPECT_EQ(dist::launcher::local_rank_from_environment(), 2);
  setenv("SLURM_LOCALID", "1", 1);
  EXPECT_EQ(dist::launcher::local_rank_from_environment(), 1);  // srun's before mpirun's
  setenv("LOCAL_RANK", "x", 1);
  expect_error<ValueError>([] { dist::launcher::local_rank_from_environment(); }, {"LOCAL_RANK='x'"});
  for (const char* name : names) unsetenv(name);
}

TEST(TrainDevice, AnUnknownDeviceIsRefusedByName) {
  TrainConfig c = mlp_config(fresh_dir("bad_device"), "gpu");
  expect_error<ValueError>([&] { validate(c); }, {"train.device = 'gpu'", "cpu, cuda or cuda:N"});
  c.train.device = "cuda:x";
  expect_error<ValueError>([&] { validate(c); }, {"train.device = 'cuda:x'"});
  c.train.device = "cuda:1";
  EXPECT_NO_THROW(validate(c));
}

TEST(TrainDevice, WithoutAGpuTrainingThereSaysWhy) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device: the refusal is for machines without";
  TrainConfig c = mlp_config(fresh_dir("no_gpu"), "cuda");
  expect_error<NotSupportedError>([&] { Trainer t(c); }, {"cuda"});
}

}  // namespace
}  // namespace tessera::train
