// A mixture-of-experts GPT trained by `tessera train --nproc N`: experts replicated (DDP, ZeRO-3) and
// spread over the ranks (parallel.ep), each equal to one process holding every expert on the global batch
// (no token dropped: capacity_factor 4; gradients clipped by their global norm); a checkpoint of
// spread experts (their momentum gathered) resumes in one process and one process's resumes
// spread; the routing shows in the metrics. SGD, not Adam: Adam's update of a gradient near zero
// turns float rounding differences of 1e-9 into updates of ±lr.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "tessera/io/checkpoint.h"
#include "testing/state_compare.h"
#include "testing/step_records.h"
#include "testing/temp_dir.h"
#include "testing/train_alone.h"

namespace tessera {
namespace {

std::string write_moe_config(const std::string& dir) {
  const std::string corpus = tessera::testing::write_corpus(dir, 60);
  std::string path = dir + "/config.toml";
  std::ofstream(path) << "[model]\nname = \"transformer\"\nlayers = 2\nheads = 2\nembed_dim = 16\ncontext = 16\n"
                      << "dropout = 0.0\nexperts = 4\nexpert_top_k = 2\ncapacity_factor = 4.0\naux_loss_weight = 0.01\n"
                      << "[data]\ndataset = \"text\"\npath = \"" << corpus << "\"\nval_fraction = 0.1\n"
                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.05\nclip_grad_norm = 0.5\n"
                      << "[train]\nepochs = 5\nmax_steps = 20\nthreads = 1\nlog_every = 100\nglobal_batch_size = 8\n"
                      << "eval_batch_size = 16\n";
  return path;
}

nn::StateDict train(const std::string& config, const std::string& out, int nproc, const std::string& extra = "") {
  return tessera::testing::train_with_processes(config, out, nproc, extra);
}

TEST(ExpertParallelTraining, SpreadAndReplicatedExpertsEqualOneProcess) {
  const std::string dir = tessera::testing::fresh_dir("expert_parallel", "equal");
  const std::string config = write_moe_config(dir);
  nn::StateDict single = train(config, dir + "/single", 1);
  ASSERT_FALSE(single.empty());
  ASSERT_TRUE(single.size() > 0 && std::any_of(single.begin(), single.end(), [](const auto& kv) {
    return kv.first == "h.1.moe.fc_weight" && kv.second.shape()[0] == 4;
  }));
  struct Layout {
    int nproc;
    std::string set, log_line;
  };
  for (const Layout& layout : {Layout{2, "", ""},
                               Layout{2, "--set distributed.strategy=zero --set distributed.zero_stage=3", ""},
                               Layout{2, "--set parallel.ep=2", "expert group 0 of 1 (ranks 0-1), experts 0-1 of 4"},
                               Layout{4, "--set parallel.ep=2", "expert group 0 of 2 (ranks 0-1), experts 0-1 of 4"},
                               Layout{4, "--set parallel.ep=4", "experts 0-0 of 4"}}) {
    const bool spread = layout.set.find("parallel.ep") != std::string::npos;
    const std::string out = dir + "/n" + std::to_string(layout.nproc) +
                            (spread ? "-ep" + layout.set.substr(layout.set.size() - 1) : layout.set.empty() ? "-ddp" : "-zero3");
    nn::StateDict trained = train(config, out, layout.nproc, layout.set);
    EXPECT_LT(tessera::testing::max_state_difference(single, trained), 1e-5) << layout.nproc << " " << layout.set;
    EXPECT_NE(tessera::testing::read_text(out + ".log").find(layout.log_line), std::string::npos)
        << tessera::testing::read_text(out + ".log");
    const nlohmann::json last = tessera::testing::last_step(out);
    ASSERT_TRUE(last.contains("moe_expert_load")) << last.dump();
    double total = 0;
    for (double share : last["moe_expert_load"]) total += share;
    EXPECT_NEAR(total, 1.0, 1e-6) << last.dump();
    EXPECT_EQ(last["moe_dropped_choices"].get<int64_t>(), 0) << last.dump();
    EXPECT_GE(last["moe_load_max_over_mean"].get<double>(), 1.0) << last.dump();
    EXPECT_GT(last["moe_aux_loss"].get<double>(), 0.0) << last.dump();
    // Spread experts: 2 layers, each a dispatch and a combine forward and again backward.
    if (spread) EXPECT_EQ(last.value("moe_alltoall_calls", 0), 8) << last.dump();
    else EXPECT_FALSE(last.contains("moe_alltoall_calls")) << last.dump();
  }
}

TEST(ExpertParallelTraining, SpreadExpertsCheckpointsResumeInOneProcessAndBack) {
  const std::string dir = tessera::testing::fresh_dir("expert_parallel", "resume");
  const std::string config = write_moe_config(dir);
  nn::StateDict single = train(config, dir + "/single", 1);
  train(config, dir + "/to-local", 2, "--set parallel.ep=2 --set train.max_steps=10");
  ASSERT_EQ(io::latest_checkpoint_step(dir + "/to-local/checkpoints"), 10);
  nn::StateDict local = train(config, dir + "/to-local", 1, "--resume");
  ASSERT_EQ(io::latest_checkpoint_step(dir + "/to-local/checkpoints"), 20);
  EXPECT_LT(tessera::testing::max_state_difference(single, local), 1e-5);
  // One process's checkpoint, its experts then spread over 4 ranks, in a sharded checkpoint.
  train(config, dir + "/to-spread", 1, "--set train.max_steps=10");
  nn::StateDict spread = train(config, dir + "/to-spread", 4,
                               "--set parallel.ep=4 --set train.checkpoint_format=sharded --resume");
  EXPECT_LT(tessera::testing::max_state_difference(single, spread), 1e-5);
}

TEST(ExpertParallelTraining, LayoutsThatCannotSpreadTheExpertsAreRefusedByName) {
  const std::string dir = tessera::testing::fresh_dir("expert_parallel", "refused");
  const std::string config = write_moe_config(dir);
  struct Refused {
    int nproc;
    std::string set, fragment;
  };
  for (const Refused& r : {Refused{2, "--set parallel.ep=3", "model.experts (4) must be a positive multiple of it"},
                           Refused{3, "--set parallel.ep=2 --set train.global_batch_size=12", "parallel.ep = 2 must divide the world size 3"},
                           Refused{2, "--set parallel.ep=2 --set distributed.strategy=zero", "parallel.ep needs"},
                           Refused{2, "--set parallel.ep=2 --set model.experts=0", "must be a positive multiple"},
                           Refused{1, "--set model.activation_checkpointing=true", "model.activation_checkpointing"},
                           Refused{1, "--set parallel.ep=2", "this job has one (run it with --nproc N)"},
                           Refused{1, "--set train.device=cuda", "runs on the CPU only"}}) {
    tessera::testing::expect_training_refused(config, dir + "/refused", r.nproc, r.set, r.fragment);
  }
}

}  // namespace
}  // namespace tessera
