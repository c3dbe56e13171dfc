// Context parallelism (parallel.cp) by `tessera train --nproc N`: each sequence cut over N ranks,
// attention by ring or by Ulysses' head exchange, against one process training on the whole
// sequences: the loss of every one of 100 steps within 1e-5 relative at CP = 2 and 4, and the
// parameters within 1e-5 after 20 steps at CP = 2 × DP = 2 (under DDP and ZeRO-3); a CP checkpoint
// resumes in one process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "tessera/io/checkpoint.h"
#include "testing/state_compare.h"
#include "testing/step_records.h"
#include "testing/temp_dir.h"
#include "testing/train_alone.h"

namespace tessera {
namespace {

std::string write_cp_config(const std::string& dir, int steps) {
  const std::string corpus = tessera::testing::write_corpus(dir, 200);
  std::string path = dir + "/config.toml";
  std::ofstream(path) << "[model]\nname = \"transformer\"\nlayers = 2\nheads = 4\nembed_dim = 16\ncontext = 32\n"
                      << "dropout = 0.0\n"
                      << "[data]\ndataset = \"text\"\npath = \"" << corpus << "\"\nval_fraction = 0.1\n"
                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.05\n"
                      << "[train]\nepochs = 20\nmax_steps = " << steps << "\nthreads = 1\nlog_every = 1\n"
                      << "global_batch_size = 8\neval_batch_size = 16\n";
  return path;
}

nn::StateDict train(const std::string& config, const std::string& out, int nproc, const std::string& extra = "") {
  return tessera::testing::train_with_processes(config, out, nproc, extra);
}

std::vector<double> losses(const std::string& out) {
  std::vector<double> values;
  for (const auto& r : tessera::testing::step_records(out)) values.push_back(r["loss"].get<double>());
  return values;
}

TEST(ContextParallelTraining, EveryStepsLossEqualsOneProcessAndTheParametersToo) {
  const std::string dir = tessera::testing::fresh_dir("context_parallel", "equal");
  const std::string config = write_cp_config(dir, 100);
  nn::StateDict single = train(config, dir + "/single", 1);
  const std::vector<double> reference = losses(dir + "/single");
  ASSERT_EQ(reference.size(), 100u);
  for (const std::string attention : {"ring", "ulysses"})
  for (int cp : {2, 4}) {
    const std::string out = dir + "/cp" + std::to_string(cp) + attention;
    nn::StateDict spread = train(config, out, cp, "--set parallel.cp=" + std::to_string(cp) +
                                                      " --set parallel.cp_attention=" + attention);
    EXPECT_NE(tessera::testing::read_text(out + ".log").find("part 1/" + std::to_string(cp) + " of each sequence, " +
                                                             (attention == "ring" ? "ring" : "Ulysses")),
              std::string::npos) << tessera::testing::read_text(out + ".log");
    const std::vector<double> got = losses(out);
    ASSERT_EQ(got.size(), reference.size()) << "cp " << cp;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - reference[i]) / reference[i]);
    EXPECT_LT(worst, 1e-5) << "cp " << cp << " " << attention << ": the loss over 100 steps";
    // Each epoch's evaluation too (every rank of a group counts the batch once between them).
    const auto evals = [](const std::string& run) {
      std::vector<double> v;
      std::ifstream metrics(run + "/metrics.jsonl");
      for (std::string line; std::getline(metrics, line);)
        if (auto r = nlohmann::json::parse(line); r.value("type", "") == "epoch") v.push_back(r["eval_loss"].get<double>());
      return v;
    };
    const std::vector<double> want_eval = evals(dir + "/single"), got_eval = evals(out);
    ASSERT_EQ(got_eval.size(), want_eval.size());
    ASSERT_FALSE(want_eval.empty());
    for (size_t i = 0; i < got_eval.size(); ++i) EXPECT_NEAR(got_eval[i], want_eval[i], 1e-5 * want_eval[i]) << "epoch " << i + 1;
    EXPECT_LT(tessera::testing::max_state_difference(single, spread), 1e-4) << "cp " << cp << " " << attention;
  }
}

// Under ZeRO (TorchTitan's FSDP with context parallelism): stage 3 shards the parameters over all four
// ranks (or, hybrid, over pairs of them), two context groups of two read the batches; the result is
// one process's.
TEST(ContextParallelTraining, UnderZeroStage3EqualsOneProcess) {
  const std::string dir = tessera::testing::fresh_dir("context_parallel", "zero");
  const std::string config = write_cp_config(dir, 20);
  nn::StateDict single = train(config, dir + "/single", 1);
  nn::StateDict sharded = train(config, dir + "/cp2zero3", 4, "--set parallel.cp=2 --set distributed.strategy=zero "
                                                               "--set distributed.zero_stage=3");
  EXPECT_LT(tessera::testing::max_state_difference(single, sharded), 1e-5);
  const std::string log = tessera::testing::read_text(dir + "/cp2zero3.log");
  EXPECT_NE(log.find("zero stage 3: 8032 parameters in 4 units, each cut into 4 pieces; context group 0 of 2 "
                     "(ranks 0-1)"), std::string::npos) << log;
  // Hybrid: ZeRO-3 inside pairs of ranks, the pairs' copies kept equal.
  nn::StateDict hybrid = train(config, dir + "/cp2hsdp", 4, "--set parallel.cp=2 --set distributed.strategy=hsdp "
                                                             "--set distributed.zero_stage=3 --set distributed.hsdp_shard_size=2");
  EXPECT_LT(tessera::testing::max_state_difference(single, hybrid), 1e-5);
  const std::string hybrid_log = tessera::testing::read_text(dir + "/cp2hsdp.log");
  EXPECT_NE(hybrid_log.find("hsdp, 2 replicas of 2 ranks, zero stage 3 inside each"), std::string::npos) << hybrid_log;
  EXPECT_NE(hybrid_log.find("context group 0 of 2 (ranks 0-1)"), std::string::npos) << hybrid_log;
}

TEST(ContextParallelTraining, WithDataParallelReplicasEqualsOneProcessAndResumesInOne) {
  const std::string dir = tessera::testing::fresh_dir("context_parallel", "replicas");
  const std::string config = write_cp_config(dir, 20);
  nn::StateDict single = train(config, dir + "/single", 1);
  nn::StateDict mesh = train(config, dir + "/cp2dp2", 4, "--set parallel.cp=2");
  EXPECT_LT(tessera::testing::max_state_difference(single, mesh), 1e-5);
  EXPECT_NE(tessera::testing::read_text(dir + "/cp2dp2.log").find("context group 0 of 2 (ranks 0-1)"), std::string::npos)
      << tessera::testing::read_text(dir + "/cp2dp2.log");
  train(config, dir + "/resumed", 2, "--set parallel.cp=2 --set train.max_steps=10");
  ASSERT_EQ(io::latest_checkpoint_step(dir + "/resumed/checkpoints"), 10);
  nn::StateDict resumed = train(config, dir + "/resumed", 1, "--resume");
  EXPECT_LT(tessera::testing::max_state_difference(single, resumed), 1e-5);
}

TEST(ContextParallelTraining, LayoutsThatCannotCutTheSequenceAreRefusedByName) {
  const std::string dir = tessera::testing::fresh_dir("context_parallel", "refused");
  const std::string config = write_cp_config(dir, 4);
  struct Refused {
    int nproc;
    std::string set, fragment;
  };
  for (const Refused& r : {Refused{3, "--set parallel.cp=3", "must be a multiple of 2 · parallel.cp"},
                           Refused{3, "--set parallel.cp=3 --set parallel.cp_attention=ulysses --set "
                                      "train.global_batch_size=12 --set model.context=30", "model.heads (4) must be a multiple"},
                           Refused{3, "--set parallel.cp=2 --set train.global_batch_size=12", "parallel.cp = 2 must divide the world size 3"},
                           Refused{2, "--set parallel.cp=2 --set parallel.tp=2 --set train.global_batch_size=0 --set train.batch_size=4",
                                   "it has dp = 1 (world 2 / (pp 1 · tp 2))"},
                           Refused{2, "--set parallel.cp=2 --set model.experts=4 --set parallel.ep=2", "parallel.cp needs"}}) {
    tessera::testing::expect_training_refused(config, dir + "/refused", r.nproc, r.set, r.fragment);
  }
}

}  // namespace
}  // namespace tessera
