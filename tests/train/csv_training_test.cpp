// `tessera train` on a CSV table (data.dataset = "csv"): logistic regression learns, linear
// regression reports its mean squared error, and a table that does not fit the config is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

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

}  // namespace
}  // namespace tessera::train
