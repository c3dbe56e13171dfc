// `tessera train --nproc N` with parallel.pp / parallel.tp: real processes under the launcher (p2p
// over gloo, collectives over the auto backend) end with the parameters one process reaches on the
// same batches, and the checkpoint they write is one `tessera generate` samples from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "tessera/io/checkpoint.h"
#include "tessera/nn/module.h"
#include "testing/step_records.h"
#include "testing/temp_dir.h"
#include "testing/state_compare.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string write_config(const std::string& dir) {
  std::string corpus = dir + "/corpus.txt";
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 60; ++i) out << (i % 3 ? "to be or not to be, that is the question\n" : "all the world's a stage\n");
  }
  std::string path = dir + "/config.toml";
  std::ofstream(path) << "[model]\nname = \"transformer\"\nlayers = 2\nheads = 4\nembed_dim = 16\ncontext = 8\ndropout = 0.0\n"
                      << "[data]\ndataset = \"text\"\npath = \"" << corpus << "\"\n"
                      << "[optimizer]\nname = \"sgd\"\nlr = 0.1\nmomentum = 0.9\nclip_grad_norm = 1.0\n"
                      << "[train]\nepochs = 1\nmax_steps = 10\nthreads = 1\nlog_every = 100\n"
                      << "[parallel]\nmicrobatches = 2\n";
  return path;
}

std::string run(const std::string& cmd, const std::string& log) {
  int status = std::system((cmd + " > " + log + " 2>&1").c_str());
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(status, 0) << cmd << "\n" << text;
  return text;
}

nn::StateDict train(const std::string& config, const std::string& out, int nproc, int batch, const std::string& extra) {
  run(std::string(TESSERA_BINARY) + " train " + config + " --nproc " + std::to_string(nproc) +
          " --set train.batch_size=" + std::to_string(batch) + " --set train.output_dir=" + out + " " + extra,
      out + ".log");
  return io::load_checkpoint(out + "/checkpoints").model.tensors;
}

TEST(ModelParallelProcesses, PipelineAndTensorParallelJobsEqualOneProcess) {
  const std::string dir = tessera::testing::fresh_dir("mpproc", "layouts");
  const std::string config = write_config(dir);
  nn::StateDict single = train(config, dir + "/single", 1, 8, "");
  nn::StateDict dp_pp = train(config, dir + "/dp2pp2", 4, 4, "--set parallel.pp=2");
  EXPECT_LT(tessera::testing::worst_relative_error(dp_pp, single), 1e-4);
  nn::StateDict tp = train(config, dir + "/tp2", 2, 8, "--set parallel.tp=2 --set parallel.schedule=gpipe");
  EXPECT_LT(tessera::testing::worst_relative_error(tp, single), 1e-4);
  // Per micro-batch (2): forward, the embedding's and the 4 projections' all-reduces; backward, those
  // of qkv, fc (2 layers) and lm_head's input gradients.
  EXPECT_EQ(tessera::testing::last_step(dir + "/tp2").value("tp_comm_calls", -1), 2 * (5 + 5));
  nn::StateDict interleaved = train(config, dir + "/pp2v2", 2, 8,
                                    "--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2");
  EXPECT_LT(tessera::testing::worst_relative_error(interleaved, single), 1e-4);
  nn::StateDict zero_bubble = train(config, dir + "/pp2zb", 2, 8, "--set parallel.pp=2 --set parallel.schedule=zb-h1");
  EXPECT_LT(tessera::testing::worst_relative_error(zero_bubble, single), 1e-4);
  // Two V-shaped pipelines side by side: the loss on each pipeline's stage 0.
  nn::StateDict zero_bubble_v = train(config, dir + "/dp2pp2zbv", 4, 4, "--set parallel.pp=2 --set parallel.schedule=zb-v");
  EXPECT_LT(tessera::testing::worst_relative_error(zero_bubble_v, single), 1e-4);
  std::string text = run(std::string(TESSERA_BINARY) + " generate " + dir + "/dp2pp2 --tokens 20 --prompt to",
                         dir + "/generate.log");
  EXPECT_EQ(text.rfind("to", 0), 0u) << text;
  EXPECT_GE(text.size(), 22u) << text;
}

// Sequence parallelism: the tokens cut over the tensor-parallel ranks, its collectives overlapped in
// chunks (or not), alone, inside a pipeline (1F1B and zero-bubble) and beside data parallelism, end
// where one process does; each step reports what its collectives cost the compute thread.
TEST(ModelParallelProcesses, SequenceParallelJobsEqualOneProcess) {
  const std::string dir = tessera::testing::fresh_dir("mpproc", "sequence");
  const std::string config = write_config(dir);
  nn::StateDict single = train(config, dir + "/single", 1, 8, "");
  const std::string sp = "--set parallel.tp=2 --set parallel.sequence_parallel=true ";
  nn::StateDict overlapped = train(config, dir + "/sp", 2, 8, sp + "--set parallel.tp_overlap_chunks=3");
  EXPECT_LT(tessera::testing::worst_relative_error(overlapped, single), 1e-4);
  nn::StateDict plain = train(config, dir + "/sp1", 2, 8, sp + "--set parallel.tp_overlap_chunks=1");
  EXPECT_LT(tessera::testing::worst_relative_error(plain, single), 1e-4);
  nn::StateDict piped = train(config, dir + "/pp2sp", 4, 8, sp + "--set parallel.pp=2");
  EXPECT_LT(tessera::testing::worst_relative_error(piped, single), 1e-4);
  // Zero-bubble: the weight gradients of the gathering and scattering linears wait for the W pass.
  nn::StateDict zero_bubble = train(config, dir + "/pp2sp_zb", 4, 8, sp + "--set parallel.pp=2 --set parallel.schedule=zb-h1");
  EXPECT_LT(tessera::testing::worst_relative_error(zero_bubble, single), 1e-4);
  nn::StateDict replicas = train(config, dir + "/dp2sp", 4, 4, sp);
  EXPECT_LT(tessera::testing::worst_relative_error(replicas, single), 1e-4);
  // Per step, forward and backward, per micro-batch (2): qkv, fc (2 layers) and lm_head gather, the 4
  // projections reduce-scatter, in 3 chunks each; the backward gathers those 5 gathered inputs again,
  // the embedding's scatter gathers its gradient once, and the vocabulary-parallel embedding
  // all-reduces once.
  const nlohmann::json step = tessera::testing::last_step(dir + "/sp");
  EXPECT_EQ(step.value("tp_comm_calls", -1), 2 * ((2 * (2 * 4 + 1) + 5) * 3 + 2)) << step.dump();
  EXPECT_GT(step.value("tp_comm_bytes", 0), 0) << step.dump();
  EXPECT_GE(step.value("tp_comm_exposed_ms", -1.0), 0.0) << step.dump();
  EXPECT_FALSE(tessera::testing::last_step(dir + "/single").contains("tp_comm_calls"));
}

// Context parallelism inside the mesh: every sequence cut over 2 ranks of the data-parallel dimension,
// beside tensor parallelism (ring and Ulysses, and with sequence parallelism on top) and beside a
// pipeline; each ends where one process does.
TEST(ModelParallelProcesses, ContextParallelInsideTheMeshEqualsOneProcess) {
  const std::string dir = tessera::testing::fresh_dir("mpproc", "context");
  const std::string config = write_config(dir);
  nn::StateDict single = train(config, dir + "/single", 1, 8, "");
  const std::string cp = "--set parallel.cp=2 ";
  nn::StateDict tp_ring = train(config, dir + "/tp2cp2", 4, 8, cp + "--set parallel.tp=2");
  EXPECT_LT(tessera::testing::worst_relative_error(tp_ring, single), 1e-4);
  nn::StateDict tp_ulysses = train(config, dir + "/tp2cp2u", 4, 8, cp + "--set parallel.tp=2 --set parallel.cp_attention=ulysses");
  EXPECT_LT(tessera::testing::worst_relative_error(tp_ulysses, single), 1e-4);
  EXPECT_NE(tessera::testing::read_text(dir + "/tp2cp2u.log").find("Ulysses attention"), std::string::npos);
  nn::StateDict tp_sp = train(config, dir + "/tp2cp2sp", 4, 8, cp + "--set parallel.tp=2 --set parallel.sequence_parallel=true");
  EXPECT_LT(tessera::testing::worst_relative_error(tp_sp, single), 1e-4);
  nn::StateDict piped = train(config, dir + "/pp2cp2", 4, 8, cp + "--set parallel.pp=2");
  EXPECT_LT(tessera::testing::worst_relative_error(piped, single), 1e-4);
  // Zero-bubble orders are planned from measured passes: the context partners' pipelines share one.
  nn::StateDict zero_bubble = train(config, dir + "/pp2cp2zb", 4, 8, cp + "--set parallel.pp=2 --set parallel.schedule=zb-h1");
  EXPECT_LT(tessera::testing::worst_relative_error(zero_bubble, single), 1e-4);
}

TEST(ModelParallelProcesses, TooFewProcessesAreRefusedClearly) {
  const std::string dir = tessera::testing::fresh_dir("mpproc", "refused");
  const std::string config = write_config(dir);
  std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --set parallel.pp=2 --set train.output_dir=" +
                    dir + "/out > " + dir + "/log 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_NE(tessera::testing::read_text(dir + "/log").find("--nproc 2"), std::string::npos);
}

// A pipeline-parallel job stopped at step 5 and resumed with --resume ends bit for bit where the
// uninterrupted job does; its checkpoint, written in one process's layout, also resumes on a
// tensor-parallel layout and in one process, and they end where the uninterrupted job does (within
// the layouts' summation-order tolerance); a one-process checkpoint resumes on PP and on TP likewise.
TEST(ModelParallelProcesses, ResumedPipelineJobEqualsTheUninterruptedOneAndResumesAtOtherLayouts) {
  const std::string dir = tessera::testing::fresh_dir("mpproc", "resume");
  const std::string config = write_config(dir);
  nn::StateDict whole = train(config, dir + "/whole", 2, 8, "--set parallel.pp=2");
  train(config, dir + "/part", 2, 8, "--set parallel.pp=2 --set train.max_steps=5");
  ASSERT_EQ(io::latest_checkpoint_step(dir + "/part/checkpoints"), 5);
  for (const char* layout : {"tp", "one"}) fs::copy(dir + "/part", dir + "/" + layout, fs::copy_options::recursive);
  nn::StateDict resumed = train(config, dir + "/part", 2, 8, "--set parallel.pp=2 --resume");
  EXPECT_EQ(tessera::testing::count_bitwise_differences(resumed, whole), 0);
  nn::StateDict tp = train(config, dir + "/tp", 2, 8, "--set parallel.tp=2 --set parallel.schedule=gpipe --resume");
  EXPECT_LT(tessera::testing::worst_relative_error(tp, whole), 1e-4);
  nn::StateDict one = train(config, dir + "/one", 1, 8, "--resume");
  EXPECT_LT(tessera::testing::worst_relative_error(one, whole), 1e-4);
  EXPECT_EQ(io::latest_checkpoint_step(dir + "/one/checkpoints"), 10);
  // And back: a one-process checkpoint resumes on a pipeline and on a tensor-parallel layout.
  train(config, dir + "/from_one", 1, 8, "--set train.max_steps=5");
  fs::copy(dir + "/from_one", dir + "/from_one_tp", fs::copy_options::recursive);
  nn::StateDict pp_from_one = train(config, dir + "/from_one", 2, 8, "--set parallel.pp=2 --resume");
  EXPECT_LT(tessera::testing::worst_relative_error(pp_from_one, whole), 1e-4);
  nn::StateDict tp_from_one =
      train(config, dir + "/from_one_tp", 2, 8, "--set parallel.tp=2 --set parallel.schedule=gpipe --resume");
  EXPECT_LT(tessera::testing::worst_relative_error(tp_from_one, whole), 1e-4);
}

}  // namespace
}  // namespace tessera
