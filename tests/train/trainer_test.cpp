// End-to-end training through the Trainer (the code path of `tessera train`).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "tessera/core/cpu_allocator.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/checkpoint.h"
#include "tessera/ops/ops.h"
#include "tessera/train/trainer.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::train;
namespace fs = std::filesystem;

namespace {

TrainConfig synthetic_config(const std::string& dir) {
  TrainConfig c;
  c.model.name = "mlp";
  c.model.hidden = {32};
  c.model.dropout = 0.2;  // exercises the RNG state in checkpoints
  c.data.dataset = "synthetic";
  c.data.samples = 512;
  c.data.test_samples = 128;
  c.data.classes = 4;
  c.optimizer.name = "adam";
  c.optimizer.lr = 0.003;
  c.schedule.name = "cosine";
  c.schedule.warmup_steps = 3;
  c.train.epochs = 3;
  c.train.batch_size = 32;  // 16 steps per epoch
  c.train.output_dir = dir;
  c.train.log_every = 5;
  return c;
}

std::string fresh_dir(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("tessera_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::vector<std::vector<float>> parameters_of(Trainer& t) {
  std::vector<std::vector<float>> out;
  for (auto& p : t.model().parameters()) out.push_back(p.to_vector<float>());
  return out;
}

}  // namespace

TEST(Trainer, ResumedRunIsBitwiseEqualToUninterrupted) {
  // Uninterrupted: 3 epochs of 16 steps.
  Trainer full(synthetic_config(fresh_dir("full")));
  FitResult r = full.fit();
  EXPECT_EQ(r.steps, 48);
  // Interrupted mid-epoch at step 21, then resumed in a new Trainer from the checkpoint.
  std::string dir = fresh_dir("resumed");
  TrainConfig first = synthetic_config(dir);
  first.train.max_steps = 21;
  {
    Trainer part(first);
    FitResult pr = part.fit();
    EXPECT_TRUE(pr.stopped_early);
    EXPECT_EQ(pr.steps, 21);
  }
  Trainer resumed(synthetic_config(dir));
  resumed.resume();
  EXPECT_EQ(resumed.global_step(), 21);
  FitResult rr = resumed.fit();
  EXPECT_EQ(rr.steps, 48);
  auto a = parameters_of(full), b = parameters_of(resumed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "parameter " << i << " differs after resume";
  ASSERT_TRUE(r.last_eval && rr.last_eval);
  EXPECT_EQ(r.last_eval->loss, rr.last_eval->loss);
  EXPECT_GT(r.last_eval->accuracy, 0.5);  // 4 classes: well above chance
}

TEST(Trainer, CheckpointsAreCompleteAndOldOnesPruned) {
  std::string dir = fresh_dir("ckpt");
  TrainConfig c = synthetic_config(dir);
  c.train.epochs = 1;
  c.train.checkpoint_every = 4;
  c.train.keep_checkpoints = 2;
  Trainer t(c);
  t.fit();
  int steps = 0;
  for (auto& e : fs::directory_iterator(fs::path(dir) / "checkpoints")) {
    std::string n = e.path().filename().string();
    EXPECT_EQ(n.find(".tmp"), std::string::npos) << "temporary left behind: " << n;
    steps += n.rfind("step-", 0) == 0;
  }
  EXPECT_EQ(steps, 2);
  auto files = io::load_checkpoint(dir);
  EXPECT_EQ(files.trainer.metadata.at("tessera.step"), "16");
  EXPECT_EQ(files.model.metadata.at("format"), "pt");
  EXPECT_TRUE(fs::exists(fs::path(dir) / "metrics.jsonl"));
}

// The lost checkpoint a new user met: run A left steps 44 and 48 in the directory; run B, shorter,
// saved steps 4, 8, 12, 16 with keep 2, and the retention (by step number, over every run) deleted
// B's own final step, leaving `latest` pointing at nothing. Retention now counts only the run's own
// steps, and a fresh run refuses a directory with another run's checkpoints unless told.
TEST(Trainer, AnotherRunsCheckpointsAreNeverDeletedNorSilentlyReused) {
  std::string dir = fresh_dir("two_runs");
  TrainConfig a = synthetic_config(dir);
  a.train.checkpoint_every = 4;
  a.train.keep_checkpoints = 2;
  Trainer(a).fit();  // run A: steps 44 and 48 kept
  const std::string a_latest = io::latest_checkpoint(dir + "/checkpoints");
  ASSERT_EQ(io::latest_checkpoint_step(dir + "/checkpoints"), 48);
  const std::string a_run = io::checkpoint_run_id(a_latest);
  ASSERT_FALSE(a_run.empty());

  // A fresh run B in the same directory is refused, with what to do.
  TrainConfig b = a;
  b.train.epochs = 1;  // steps 4..16
  try {
    Trainer(b).fit();
    FAIL() << "a fresh run into a directory holding another run's checkpoints was not refused";
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("holds another run's checkpoints"), std::string::npos) << what;
    EXPECT_NE(what.find("--resume"), std::string::npos) << what;
    EXPECT_NE(what.find("--overwrite"), std::string::npos) << what;
    EXPECT_NE(what.find("train.output_dir"), std::string::npos) << what;
  }
  EXPECT_EQ(io::latest_checkpoint(dir + "/checkpoints"), a_latest);  // untouched

  // Retention at the checkpoint level: run B's steps next to run A's. B keeps its own last two,
  // and A's higher-numbered steps stay where they are.
  io::SafetensorsFile model, trainer_state;
  model.metadata["format"] = "pt";
  trainer_state.metadata["tessera.step"] = "0";
  for (int64_t step : {4, 8, 12, 16}) io::save_checkpoint(dir + "/checkpoints", step, model, trainer_state, 2, "run-b");
  std::set<std::string> names;
  for (auto& e : fs::directory_iterator(fs::path(dir) / "checkpoints")) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"latest", "step-00000012", "step-00000016", "step-00000044", "step-00000048"}));
  EXPECT_EQ(io::latest_checkpoint_step(dir + "/checkpoints"), 16);
  EXPECT_EQ(io::checkpoint_run_id(io::latest_checkpoint(dir + "/checkpoints")), "run-b");
  // Another run's step directory of the same number is never replaced.
  EXPECT_THROW(io::save_checkpoint(dir + "/checkpoints", 44, model, trainer_state, 2, "run-b"), IoError);
  EXPECT_EQ(io::checkpoint_run_id(dir + "/checkpoints/step-00000044"), a_run);

  // --overwrite moves the previous runs aside (never deletes them) and trains afresh.
  b.train.overwrite = true;
  Trainer fresh(b);
  FitResult r = fresh.fit();
  EXPECT_EQ(r.steps, 16);
  EXPECT_EQ(io::latest_checkpoint_step(dir + "/checkpoints"), 16);
  EXPECT_EQ(io::checkpoint_run_id(io::latest_checkpoint(dir + "/checkpoints")), fresh.run_id());
  EXPECT_TRUE(fs::exists(fs::path(dir) / "previous-run-b" / "checkpoints" / "step-00000016"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "previous-run-b" / "checkpoints" / "step-00000048"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "previous-run-b" / "metrics.jsonl"));
}

TEST(Trainer, MismatchedCheckpointIsRejectedClearly) {
  std::string dir = fresh_dir("mismatch");
  TrainConfig c = synthetic_config(dir);
  c.train.max_steps = 2;
  Trainer(c).fit();
  TrainConfig other = synthetic_config(dir);
  other.model.hidden = {16};
  Trainer t(other);
  tessera::testing::expect_error<ValueError>([&] { t.resume(); }, {"shape mismatch", "1.weight"});
  tessera::testing::expect_error<IoError>([&] { t.resume(dir + "/nowhere"); }, {"does not exist"});
}

TEST(Trainer, CorruptOrTruncatedCheckpointIsRejected) {
  std::string dir = fresh_dir("corrupt");
  TrainConfig c = synthetic_config(dir);
  c.train.max_steps = 2;
  std::string step_dir = Trainer(c).fit().last_checkpoint;
  std::string model_file = step_dir + "/model.safetensors";
  std::string bytes = io::read_file(model_file);
  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 0x40;  // one bit in the last tensor's data
  io::write_file_atomic(model_file, flipped);
  Trainer t(synthetic_config(dir));
  tessera::testing::expect_error<IoError>([&] { t.resume(); }, {"model.safetensors", "tensor '4.bias' is corrupt"});  // the last tensor
  io::write_file_atomic(model_file, bytes.substr(0, bytes.size() / 2));
  tessera::testing::expect_error<IoError>([&] { t.resume(); }, {"model.safetensors"});
}

TEST(Trainer, MetricsHaveEveryStepAndEpoch) {
  std::string dir = fresh_dir("metrics");
  TrainConfig c = synthetic_config(dir);
  c.train.epochs = 1;
  Trainer(c).fit();
  std::string text = io::read_file(dir + "/metrics.jsonl");
  auto count = [&](const std::string& needle) {
    int n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  };
  int steps = count("\"type\":\"step\""), epochs = count("\"type\":\"epoch\"");
  EXPECT_EQ(steps, 16);
  EXPECT_EQ(epochs, 1);
  EXPECT_NE(text.find("\"eval_accuracy\""), std::string::npos);
}

TEST(Trainer, LarsAndLambTrainThroughTheConfig) {
  // optimizer.name = lars / lamb reach the optimizers; each learns the synthetic task (Adam, with
  // dropout, reaches ~0.6 here). LARS moves each weight matrix by lr * trust_coefficient of its norm
  // and the biases by plain lr (excluded from adaptation), hence lr 1 with eta 0.01 for this MLP.
  for (auto [name, lr] : {std::pair<std::string, double>{"lars", 1.0}, {"lamb", 0.05}}) {
    TrainConfig c = synthetic_config(fresh_dir(name));
    c.model.dropout = 0.0;
    c.optimizer.name = name;
    c.optimizer.lr = lr;
    c.optimizer.trust_coefficient = 0.01;
    c.optimizer.weight_decay = 1e-4;
    c.optimizer.scale_lr = "linear";  // world size 1 for now: no change
    FitResult r = Trainer(c).fit();
    ASSERT_TRUE(r.last_eval.has_value()) << name;
    EXPECT_GT(r.last_eval->accuracy, 0.6) << name << ": 4 classes, well above chance";
  }
}

TEST(Trainer, MlpOnRealFashionMnistLearnsQuickly) {
  TrainConfig c;
  c.model.name = "mlp";
  c.train.max_steps = 150;
  c.train.output_dir = fresh_dir("fmnist");
  c.train.eval_batch_size = 2000;
  Trainer t(c);
  t.fit();
  EvalResult e = t.evaluate();
  EXPECT_EQ(e.samples, 10000);
  EXPECT_GT(e.accuracy, 0.75) << "150 Adam steps on Fashion-MNIST should pass 75% test accuracy";
}

// train.memory_budget_mb sets the process's memory budget before the data is loaded: 512 synthetic
// images of 28 x 28 float32 (1.6 MB) are past 1 MiB, and the run stops with the budget named.
TEST(Trainer, MemoryBudgetFromTheConfigRefusesARunPastIt) {
  const size_t saved = cpu_allocator::memory_budget();
  TrainConfig c = synthetic_config(fresh_dir("memory_budget"));
  c.train.memory_budget_mb = 1;
  tessera::testing::expect_error<OutOfMemoryError>([&] { Trainer(c).fit(); },
                                                   {"[empty]", "memory budget of 1048576 bytes"});
  EXPECT_EQ(cpu_allocator::memory_budget(), saved);  // the run's budget ended with it (refused or not)
}
