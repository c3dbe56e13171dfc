// `tessera train` on a CSV table (data.dataset = "csv"): logistic regression learns, linear
// regression reports its mean squared error, and a table that does not fit the config is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "tessera/core/cpu_allocator.h"
#include "tessera/core/error.h"
#include "tessera/train/config.h"
#include "tessera/train/run.h"
#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

// y = class of the sign of x0 + x1 (logistic), or 2 x0 - x1 + noise (the "value" column).
void write_table(const std::string& path, int rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::ofstream out(path);
  out << "x0,x1,label,value\n";
  for (int i = 0; i < rows; ++i) {
    const double a = normal(rng), b = normal(rng);
    out << a << "," << b << "," << (a + b > 0 ? 1 : 0) << "," << 2 * a - b + 0.01 * normal(rng) << "\n";
  }
}

TrainConfig csv_config(const std::string& dir, const std::string& model) {
  write_table(dir + "/train.csv", 512, 1);
  write_table(dir + "/test.csv", 256, 2);
  return parse_config("[model]\nname = \"" + model + "\"\ninput_dim = 3\n"
                      "[data]\ndataset = \"csv\"\npath = \"" + dir + "/train.csv\"\ntest_path = \"" + dir +
                          "/test.csv\"\nclasses = 2\nlabel = \"" + (model == "linear" ? "value" : "label") + "\"\n"
                      "[optimizer]\nname = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n"
                      "[train]\nepochs = 5\nbatch_size = 32\nthreads = 1\nlog_every = 1000\noutput_dir = \"" + dir + "/run\"\n",
                      "test");
}

TEST(CsvTraining, LogisticRegressionLearnsATable) {
  const std::string dir = tessera::testing::fresh_dir("csv_training", "logistic");
  RunOutcome out = run(csv_config(dir, "logistic"), {.stop_on_signals = false});
  ASSERT_TRUE(out.fit.last_eval);
  EXPECT_GE(out.fit.last_eval->accuracy, 0.9);
}

TEST(CsvTraining, LinearRegressionReportsItsMeanSquaredError) {
  const std::string dir = tessera::testing::fresh_dir("csv_training", "linear");
  // The "label" column (0/1) is a feature here: 3 features, the regression target is "value".
  RunOutcome out = run(csv_config(dir, "linear"), {.stop_on_signals = false});
  ASSERT_TRUE(out.fit.last_eval);
  EXPECT_TRUE(std::isnan(out.fit.last_eval->accuracy));
  EXPECT_LT(out.fit.last_eval->loss, 0.05);  // the noise is 1e-4; 5 epochs of SGD get close
}

TEST(CsvTraining, ATableThatDoesNotFitTheConfigIsRefused) {
  const std::string dir = tessera::testing::fresh_dir("csv_training", "refused");
  TrainConfig c = csv_config(dir, "logistic");
  c.model.input_dim = 5;
  EXPECT_THROW(run(c, {.stop_on_signals = false}), ValueError);
  TrainConfig missing = csv_config(dir, "logistic");
  missing.data.test_path.clear();
  EXPECT_THROW(validate(missing), ValueError);
  EXPECT_THROW(validate(parse_config("[model]\nname = \"logistic\"\n", "test")), ValueError);  // needs csv
}


// A table wider than the others: 40,000 rows of 32 features, 5 MB as float32 (13 MB of text), in
// four partitions. The label is the sign of the first two features' sum, as above.
std::string write_wide_table(const std::string& dir, int rows, uint64_t seed) {
  std::filesystem::create_directories(dir);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  for (int part = 0; part < 4; ++part) {
    std::ofstream out(dir + "/part-" + std::to_string(part) + ".csv");
    out << "label";
    for (int f = 0; f < 32; ++f) out << ",x" << f;
    out << "\n";
    for (int i = 0; i < rows / 4; ++i) {
      double v[32];
      for (double& x : v) x = normal(rng);
      out << (v[0] + v[1] > 0 ? 1 : 0);
      for (double x : v) out << "," << x;
      out << "\n";
    }
  }
  return dir;
}

std::string wide_config_text(const std::string& dir, bool streaming) {
  return "[model]\nname = \"logistic\"\ninput_dim = 32\n"
         "[data]\ndataset = \"csv\"\npath = \"" + write_wide_table(dir + "/train", 40000, 3) + "\"\ntest_path = \"" +
         write_wide_table(dir + "/test", 4000, 4) + "\"\nclasses = 2\nstreaming = " + (streaming ? "true" : "false") + "\n"
         "[optimizer]\nname = \"sgd\"\nlr = 0.1\nmomentum = 0.9\n"
         "[train]\nepochs = 1\nbatch_size = 64\nthreads = 1\nlog_every = 1000\nmemory_budget_mb = 2\n"
         "output_dir = \"" + dir + "/run\"\n";
}

// The point of streaming: the table (5 MB as tensors) is larger than the process's memory budget
// (2 MiB of live tensors), so loading it is refused, while reading it where it lies trains.
TEST(CsvStreaming, ATableLargerThanTheMemoryBudgetTrainsWhereLoadingItIsRefused) {
  const std::string dir = tessera::testing::fresh_dir("csv_training", "streaming");
  const size_t budget = cpu_allocator::memory_budget();
  EXPECT_THROW(run(parse_config(wide_config_text(dir, false), "test"), {.stop_on_signals = false}), OutOfMemoryError);
  EXPECT_EQ(cpu_allocator::memory_budget(), budget);  // the run's budget ends with the run
  TrainConfig streaming = parse_config(wide_config_text(dir, true), "test");
  streaming.train.overwrite = true;
  RunOutcome out = run(streaming, {.stop_on_signals = false});
  ASSERT_TRUE(out.fit.last_eval);
  EXPECT_EQ(out.fit.last_eval->samples, 4000);
  EXPECT_GE(out.fit.last_eval->accuracy, 0.95);
  EXPECT_EQ(cpu_allocator::memory_budget(), budget);
  EXPECT_THROW(validate(parse_config("[data]\nstreaming = true\n", "test")), ValueError);  // csv only
}

// Two real ranks, each scanning only its half of the table's bytes, under the same budget.
TEST(CsvStreaming, TwoRanksEachReadTheirOwnBytesAndTrain) {
  const std::string dir = tessera::testing::fresh_dir("csv_training", "streaming_ranks");
  const std::string config = dir + "/config.toml";
  std::ofstream(config) << wide_config_text(dir, true);
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc 2 --set train.batch_size=32 > " +
                          dir + "/log.txt 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string log = tessera::testing::read_text(dir + "/log.txt");
  ASSERT_EQ(status, 0) << cmd << "\n" << log;
  const std::string metrics = tessera::testing::read_text(dir + "/run/metrics.jsonl");
  const size_t at = metrics.rfind("\"eval_accuracy\":");
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GE(std::stod(metrics.substr(at + 16)), 0.95) << metrics;
}

// More replicas than rows: the replicas without a row refuse together with those that have one
// (one refusing alone would leave the others waiting in a collective until the timeout).
TEST(CsvStreaming, AReplicaWithoutRowsFailsTheWholeJobAtOnce) {
  const std::string dir = tessera::testing::fresh_dir("csv_training", "streaming_empty");
  std::ofstream(dir + "/tiny.csv") << "x0,x1,label\n1,2,0\n3,4,1\n";
  const std::string config = dir + "/config.toml";
  std::ofstream(config) << "[model]\nname = \"logistic\"\ninput_dim = 2\n[data]\ndataset = \"csv\"\npath = \"" << dir
                        << "/tiny.csv\"\ntest_path = \"" << dir << "/tiny.csv\"\nclasses = 2\nstreaming = true\n"
                        << "[train]\nbatch_size = 1\nthreads = 1\noutput_dir = \"" << dir << "/run\"\n"
                        << "[distributed]\ntimeout_s = 60\n";
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc 3 > " + dir + "/log.txt 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string log = tessera::testing::read_text(dir + "/log.txt");
  EXPECT_NE(status, 0) << log;
  EXPECT_NE(log.find("byte range of " + dir + "/tiny.csv holds no rows"), std::string::npos) << log;
}

}  // namespace
}  // namespace tessera::train
