// Sharded checkpoints (train.checkpoint_format = "sharded") across layouts, through `tessera train`
// with real processes: a run saved at step 5 by one layout resumes at another and ends where one
// process training the same 10 steps does (within the model-parallel equivalence tests' 1e-4
// relative), and at the same layout bit for bit where the uninterrupted run of that layout does. The
// layouts: one process, DDP, ZeRO-1, ZeRO-3, a pipeline, tensor parallelism and both, and parameter
// servers, over 1, 2 and 4 processes; SGD with momentum, so the optimizer's buffers travel too. A
// damaged piece is refused before training, naming the tensor and the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tessera/io/checkpoint.h"
#include "tessera/nn/module.h"
#include "testing/state_compare.h"
#include "testing/temp_dir.h"
#include "testing/train_alone.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct Layout {
  const char* name;
  int nproc;
  std::string args;  // the batch per process (or per replica) keeps the global batch at 8
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all{
      {"one", 1, "--set train.batch_size=8"},
      {"ddp4", 4, "--set train.batch_size=2"},
      {"zero1x2", 2, "--set train.batch_size=4 --set distributed.strategy=zero --set distributed.zero_stage=1"},
      {"zero3x4", 4, "--set train.batch_size=2 --set distributed.strategy=zero --set distributed.zero_stage=3"},
      {"pp2", 2, "--set train.batch_size=8 --set parallel.pp=2"},
      {"tp2", 2, "--set train.batch_size=8 --set parallel.tp=2 --set parallel.schedule=gpipe"},
      {"pp2tp2", 4, "--set train.batch_size=8 --set parallel.pp=2 --set parallel.tp=2"},
      {"ps2x2", 2, "--set train.batch_size=4 --set distributed.strategy=ps --set distributed.servers=2"},
  };
  return all;
}

std::string write_config(const std::string& dir) {
  const std::string corpus = tessera::testing::write_corpus(dir, 60);
  const std::string path = dir + "/config.toml";
  std::ofstream(path) << "[model]\nname = \"transformer\"\nlayers = 2\nheads = 4\nembed_dim = 16\ncontext = 8\ndropout = 0.0\n"
                      << "[data]\ndataset = \"text\"\npath = \"" << corpus << "\"\n"
                      << "[optimizer]\nname = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n"
                      << "[train]\nepochs = 1\nmax_steps = 10\nthreads = 1\nlog_every = 100\ncheckpoint_format = \"sharded\"\n"
                      << "[parallel]\nmicrobatches = 2\n";
  return path;
}

nn::StateDict train(const std::string& config, const std::string& out, const Layout& layout, const std::string& extra) {
  return tessera::testing::train_with_processes(config, out, layout.nproc, layout.args + " " + extra);
}

// Every layout saves step 5 (sharded) into <dir>/saved-<layout>; returns one process's uninterrupted run.
nn::StateDict save_at_every_layout(const std::string& dir, const std::string& config) {
  for (const Layout& l : layouts()) {
    train(config, dir + "/saved-" + l.name, l, "--set train.max_steps=5 --set train.checkpoint_verify=reload");
    const io::CheckpointFiles saved = io::load_checkpoint(dir + "/saved-" + l.name + "/checkpoints");
    EXPECT_FALSE(saved.pieces.empty()) << l.name;
    EXPECT_TRUE(saved.model.tensors.empty()) << l.name;  // the state is in the pieces alone
  }
  return train(config, dir + "/single", layouts()[0], "--set train.checkpoint_format=whole");
}

// Resumes `from`'s step-5 save (a copy of it) at layout `to` for the remaining 5 steps; returns the final model.
nn::StateDict resume(const std::string& dir, const std::string& config, const Layout& from, const Layout& to) {
  const std::string out = dir + "/" + from.name + "-to-" + to.name;
  fs::copy(dir + "/saved-" + from.name, out, fs::copy_options::recursive);
  return train(config, out, to, "--resume");
}

const Layout& layout(const std::string& name) {
  return *std::find_if(layouts().begin(), layouts().end(), [&](const Layout& l) { return l.name == name; });
}

// Each layout's save resumed at the next layout (the last's at the first), so every layout saves once
// and loads another's once (the whole matrix is the long tier's); at the same layout, a resumed run is
// the uninterrupted one bit for bit; and a flipped byte in a piece fails the resume before training,
// naming the file.
TEST(CheckpointLayouts, EachLayoutResumesTheNextOnesSave) {
  const std::string dir = tessera::testing::fresh_dir("layouts", "cycle");
  const std::string config = write_config(dir);
  const nn::StateDict single = save_at_every_layout(dir, config);
  const auto& all = layouts();
  for (size_t i = 0; i < all.size(); ++i) {
    const Layout& from = all[i];
    const Layout& to = all[(i + 1) % all.size()];
    EXPECT_LT(tessera::testing::worst_relative_error(resume(dir, config, from, to), single), 1e-4)
        << from.name << " -> " << to.name;
  }
  for (const char* name : {"zero3x4", "pp2tp2", "ps2x2"}) {
    const nn::StateDict uninterrupted = train(config, dir + "/whole-" + name, layout(name), "");
    EXPECT_EQ(tessera::testing::max_state_difference(resume(dir, config, layout(name), layout(name)), uninterrupted), 0.0)
        << name;
  }
  // The CLI's reload of a save: every tensor assembles whole.
  const std::string verify = std::string(TESSERA_BINARY) + " checkpoint verify --reload " + dir + "/saved-pp2tp2 > " +
                             dir + "/verify.log 2>&1";
  EXPECT_EQ(std::system(verify.c_str()), 0) << tessera::testing::read_text(dir + "/verify.log");
  EXPECT_NE(tessera::testing::read_text(dir + "/verify.log").find("assembles whole"), std::string::npos);
  const std::string out = dir + "/damaged";
  fs::copy(dir + "/saved-pp2tp2", out, fs::copy_options::recursive);
  tessera::testing::flip_last_byte(io::load_checkpoint(out + "/checkpoints").pieces + "/rank-3-of-4.safetensors");
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc 4 " + layout("pp2tp2").args +
                          " --resume --set train.output_dir=" + out + " > " + out + ".log 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string log = tessera::testing::read_text(out + ".log");
  EXPECT_NE(log.find("rank-3-of-4.safetensors"), std::string::npos) << log;
  EXPECT_NE(log.find("fails its checksum"), std::string::npos) << log;
  EXPECT_EQ(io::latest_checkpoint_step(out + "/checkpoints"), 5);
}

// Every (save layout, load layout) pair.
TEST(CheckpointLayouts, LongTierEveryLayoutResumesEveryOthersSave) {
  const std::string dir = tessera::testing::fresh_dir("layouts", "matrix");
  const std::string config = write_config(dir);
  const nn::StateDict single = save_at_every_layout(dir, config);
  for (const Layout& from : layouts())
    for (const Layout& to : layouts())
      EXPECT_LT(tessera::testing::worst_relative_error(resume(dir, config, from, to), single), 1e-4)
          << from.name << " -> " << to.name;
}

}  // namespace
}  // namespace tessera
