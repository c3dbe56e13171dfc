// The model-parallel trainer on every layout of the issue (PP=2 GPipe, PP=2 1F1B, TP=2, DP=2×PP=2,
// DP=2×TP=2; ranks as threads) against one process training the same GPT-style model on the same
// batches: the loss of each of 10 steps and the parameters after them agree within 1e-4 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "parallel/threaded_group.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/checkpoint.h"
#include "tessera/train/mesh_strategy.h"
#include "tessera/train/trainer.h"
#include "testing/expect.h"
#include "testing/temp_dir.h"
#include "testing/state_compare.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

using tessera::testing::write_corpus;

TrainConfig gpt_config(const std::string& corpus, const std::string& out, const std::string& optimizer) {
  TrainConfig c;
  c.model.name = "transformer";
  c.model.layers = 2;
  c.model.heads = 4;
  c.model.embed_dim = 16;
  c.model.context = 8;
  c.model.dropout = 0.0;  // dropout draws differ by layout
  c.data.dataset = "text";
  c.data.path = corpus;
  c.data.val_fraction = 0.1;
  c.optimizer.name = optimizer;
  c.optimizer.lr = optimizer == "sgd" ? 0.1 : 1e-3;
  c.optimizer.momentum = 0.9;
  // The attention's key bias has a gradient of exactly zero in exact arithmetic (softmax ignores a
  // shift shared by all keys); in floats it is summation-order noise near 1e-10, which Adam at
  // eps 1e-8 would turn into lr-sized steps that differ by layout. eps 1e-6 keeps noise as noise.
  c.optimizer.eps = 1e-6;
  c.optimizer.clip_grad_norm = 1.0;  // the global norm, over stages and shards
  c.schedule.name = "cosine";
  c.schedule.warmup_steps = 2;
  c.train.epochs = 1;
  c.train.batch_size = 8;
  c.train.max_steps = 10;
  c.train.threads = 1;
  c.train.log_every = 100;
  c.train.output_dir = out;
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

struct Layout {
  const char* name;
  int dp, pp, tp;
  const char* schedule;
  int64_t microbatches;
  int64_t virtual_stages = 1;
};

class ModelParallelLayouts : public ::testing::TestWithParam<std::tuple<Layout, std::string>> {};

TEST_P(ModelParallelLayouts, TenStepsEqualOneProcess) {
  const auto [layout, optimizer] = GetParam();
  const std::string dir = tessera::testing::fresh_dir("mp", std::string(layout.name) + optimizer);
  const std::string corpus = write_corpus(dir);
  TrainConfig single_config = gpt_config(corpus, dir + "/single", optimizer);
  nn::StateDict single;
  {
    Trainer trainer(single_config);
    trainer.fit();
    single = trainer.model().state_dict();
  }
  TrainConfig mp = gpt_config(corpus, dir + "/mp", optimizer);
  mp.parallel.dp = layout.dp;
  mp.parallel.pp = layout.pp;
  mp.parallel.tp = layout.tp;
  mp.parallel.schedule = layout.schedule;
  mp.parallel.microbatches = layout.microbatches;
  mp.parallel.virtual_stages = layout.virtual_stages;
  mp.train.batch_size = single_config.train.batch_size / layout.dp;  // per replica, as DDP
  const int world = layout.dp * layout.pp * layout.tp;
  nn::StateDict parallel;
  std::mutex mu;
  testing::run_on_threads(world, testing::threaded(world), [&](dist::ProcessGroup& group) {
    Trainer trainer(mp, testing::borrow(group));
    trainer.fit();
    nn::StateDict full = trainer.full_state_dict();
    std::lock_guard lock(mu);
    if (group.rank() == 0) parallel = full;
  });
  std::string worst;
  EXPECT_LT(tessera::testing::worst_relative_error(parallel, single, &worst), 1e-4) << worst;
  auto want = step_losses(dir + "/single"), got = step_losses(dir + "/mp");
  ASSERT_EQ(want.size(), 10u);
  ASSERT_EQ(got.size(), 10u);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::fabs(want[i])) << "step " << i + 1;
  // The checkpoint the job wrote is the whole model under its single-process names.
  auto ckpt = io::load_checkpoint(dir + "/mp/checkpoints");
  EXPECT_LT(tessera::testing::worst_relative_error(ckpt.model.tensors, single), 1e-4);
  EXPECT_TRUE(ckpt.model.metadata.count("tessera.vocabulary"));
}

INSTANTIATE_TEST_SUITE_P(
    Gpt, ModelParallelLayouts,
    ::testing::Combine(::testing::Values(Layout{"PP2GPipe", 1, 2, 1, "gpipe", 4}, Layout{"PP2OneFOneB", 1, 2, 1, "1f1b", 4},
                                         Layout{"TP2", 1, 1, 2, "1f1b", 1}, Layout{"DP2PP2", 2, 2, 1, "1f1b", 2},
                                         Layout{"DP2TP2", 2, 1, 2, "1f1b", 1}, Layout{"PP2TP2", 1, 2, 2, "gpipe", 2},
                                         Layout{"DP2PP2TP2", 2, 2, 2, "1f1b", 2},
                                         Layout{"PP2InterleavedV2", 1, 2, 1, "interleaved", 4, 2},
                                         Layout{"PP2ZeroBubbleH1", 1, 2, 1, "zb-h1", 4},
                                         Layout{"DP2PP2TP2ZeroBubbleH1", 2, 2, 2, "zb-h1", 2},
                                         // 8 micro-batches: the planned orders (PipelineStage) can move
                                         // forwards and backwards, which tensor-parallel partners must
                                         // do alike (PipelineOptions::same_order_as).
                                         Layout{"PP2TP2ZeroBubbleH1M8", 1, 2, 2, "zb-h1", 8},
                                         // Two chunks per stage in a V: the loss and the output on stage 0.
                                         Layout{"PP2ZeroBubbleV", 1, 2, 1, "zb-v", 4},
                                         Layout{"PP2TP2ZeroBubbleVM8", 1, 2, 2, "zb-v", 8}),
                       ::testing::Values(std::string("sgd"), std::string("adamw"))),
    [](const auto& info) { return std::string(std::get<0>(info.param).name) + std::get<1>(info.param); });

// Resume on a mesh: AdamW's state (sharded over tp, split over stages) is written in one process's
// layout; a DP2×PP2×TP2 job stopped at step 4 and resumed equals the uninterrupted job bit for bit,
// and the same checkpoint resumed in one process ends where the uninterrupted job does.
TEST(ModelParallelTrainer, ResumedMeshRunIsBitwiseEqualToUninterrupted) {
  const std::string dir = tessera::testing::fresh_dir("mp", "resume");
  const std::string corpus = write_corpus(dir);
  auto mesh_config = [&](const std::string& out, int64_t max_steps) {
    TrainConfig c = gpt_config(corpus, out, "adamw");
    c.parallel.dp = 2;
    c.parallel.pp = 2;
    c.parallel.tp = 2;
    c.parallel.microbatches = 2;
    c.train.batch_size = 4;  // per replica
    c.train.max_steps = max_steps;
    return c;
  };
  auto run_mesh = [&](const TrainConfig& config, bool resume) {
    nn::StateDict state;
    std::mutex mu;
    testing::run_on_threads(8, testing::threaded(8), [&](dist::ProcessGroup& group) {
      Trainer trainer(config, testing::borrow(group));
      if (resume) trainer.resume();
      trainer.fit();
      nn::StateDict full = trainer.full_state_dict();
      std::lock_guard lock(mu);
      if (group.rank() == 0) state = full;
    });
    return state;
  };
  nn::StateDict whole = run_mesh(mesh_config(dir + "/whole", 10), false);
  run_mesh(mesh_config(dir + "/part", 4), false);
  fs::copy(dir + "/part", dir + "/one", fs::copy_options::recursive);
  nn::StateDict resumed = run_mesh(mesh_config(dir + "/part", 10), true);
  EXPECT_EQ(tessera::testing::count_bitwise_differences(resumed, whole), 0);
  // The checkpoint's optimizer state is one process's: it resumes there too.
  TrainConfig one = gpt_config(corpus, dir + "/one", "adamw");
  Trainer trainer(one);
  trainer.resume();
  EXPECT_EQ(trainer.global_step(), 4);
  trainer.fit();
  std::string worst;
  EXPECT_LT(tessera::testing::worst_relative_error(trainer.model().state_dict(), whole, &worst), 1e-4) << worst;
}

// Stages cut by measured time instead of parameter counts: every rank must cut alike (the costs are
// averaged over the ranks), and any cut trains the same model.
TEST(ModelParallelTrainer, StagesBalancedByMeasuredTimeTrainTheSameModel) {
  const std::string dir = tessera::testing::fresh_dir("mp", "time");
  const std::string corpus = write_corpus(dir);
  TrainConfig single_config = gpt_config(corpus, dir + "/single", "sgd");
  nn::StateDict single;
  {
    Trainer trainer(single_config);
    trainer.fit();
    single = trainer.model().state_dict();
  }
  TrainConfig mp = gpt_config(corpus, dir + "/mp", "sgd");
  mp.parallel.pp = 2;
  mp.parallel.balance = "time";
  std::vector<std::vector<int64_t>> bounds(2);
  nn::StateDict parallel;
  testing::run_on_threads(2, testing::threaded(2), [&](dist::ProcessGroup& group) {
    Trainer trainer(mp, testing::borrow(group));
    bounds[group.rank()] = dynamic_cast<MeshStrategy&>(trainer.strategy()).stage_bounds();
    trainer.fit();
    nn::StateDict full = trainer.full_state_dict();
    if (group.rank() == 0) parallel = full;
  });
  EXPECT_EQ(bounds[0], bounds[1]);
  ASSERT_EQ(bounds[0].size(), 3u);
  EXPECT_LT(tessera::testing::worst_relative_error(parallel, single), 1e-4);
}

TEST(ModelParallelTrainer, BadLayoutsAreRejectedClearly) {
  const std::string dir = tessera::testing::fresh_dir("mp", "bad");
  TrainConfig c = gpt_config(write_corpus(dir), dir + "/out", "sgd");
  c.parallel.pp = 3;
  testing::run_on_threads(2, testing::threaded(2), [&](dist::ProcessGroup& group) {
    testing::expect_error<ValueError>([&] { Trainer t(c, testing::borrow(group)); }, {"2 ranks", "pp 3"});
  });
  c.parallel.pp = 2;
  c.train.batch_size = 6;
  c.parallel.microbatches = 4;
  testing::expect_error<ValueError>([&] { validate(c); }, {"train.batch_size 6", "parallel.microbatches 4"});
  c.train.batch_size = 8;
  c.parallel.schedule = "interleaved";
  testing::expect_error<ValueError>([&] { validate(c); }, {"virtual_stages >= 2", "got pp 2 and virtual_stages 1"});
  c.parallel.virtual_stages = 2;
  c.parallel.microbatches = 3;
  c.train.batch_size = 9;
  testing::expect_error<ValueError>([&] { validate(c); }, {"parallel.microbatches 3", "multiple of parallel.pp 2"});
  c.parallel.schedule = "1f1b";
  testing::expect_error<ValueError>([&] { validate(c); }, {"parallel.virtual_stages 2", "'1f1b' schedule"});
  c.parallel.schedule = "interleaved";
  c.parallel.microbatches = 4;
  c.train.batch_size = 8;
  c.parallel.schedule = "zb-v";
  c.parallel.virtual_stages = 3;
  testing::expect_error<ValueError>([&] { validate(c); }, {"'zb-v' runs 2 model chunks per stage", "virtual_stages 3"});
  c.parallel.virtual_stages = 1;
  c.parallel.pp = 1;
  testing::expect_error<ValueError>([&] { validate(c); }, {"'zb-v' needs parallel.pp >= 2, got 1"});
  c.parallel.pp = 2;
  c.parallel.schedule = "interleaved";
  c.parallel.virtual_stages = 3;  // 2 stages x 3 chunks = 6 chunks of a 4-layer chain
  testing::run_on_threads(2, testing::threaded(2), [&](dist::ProcessGroup& group) {
    testing::expect_error<ValueError>([&] { Trainer t(c, testing::borrow(group)); }, {"cannot cut 4 layers into 6"});
  });
}

}  // namespace
}  // namespace tessera::train
