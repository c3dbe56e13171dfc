#include <gtest/gtest.h>

#include "tessera/train/config.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::train;
using tessera::testing::expect_error;

TEST(Config, ParsesSectionsAndKeepsDefaults) {
  TrainConfig c = parse_config(R"(
[model]
name = "cnn"
[optimizer]
name = "sgd"
lr = 0.05
nesterov = true
[train]
epochs = 3
output_dir = "runs/x"
)", "test.toml");
  EXPECT_EQ(c.model.name, "cnn");
  EXPECT_EQ(c.optimizer.name, "sgd");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.05);
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_EQ(c.train.batch_size, 128);  // default
  validate(c);
}

TEST(Config, UnknownKeyNamesItAndSuggestsTheNearest) {
  expect_error<ValueError>([] { parse_config("[optimizer]\nlrr = 0.1\n", "a.toml"); },
                           {"unknown key 'optimizer.lrr'", "a.toml", "did you mean 'optimizer.lr'"});
  expect_error<ValueError>([] { parse_config("[train]\nlr = 0.1\n", "a.toml"); },
                           {"unknown key 'train.lr'", "'optimizer.lr'"});
  expect_error<ValueError>([] { parse_config("[modle]\nname = \"mlp\"\n", "a.toml"); }, {"unknown key 'modle.name'", "'model.name'"});
}

TEST(Config, TypeAndSyntaxErrorsNameTheKeyOrLine) {
  expect_error<ValueError>([] { parse_config("[train]\nepochs = \"five\"\n", "a.toml"); },
                           {"train.epochs", "an integer"});
  expect_error<ValueError>([] { parse_config("[train\nepochs = 5\n", "bad.toml"); }, {"bad.toml:1"});
  expect_error<ValueError>([] { parse_config("[model]\nhidden = [1, \"x\"]\n", "a.toml"); }, {"model.hidden"});
}

TEST(Config, OverridesParseByType) {
  TrainConfig c;
  apply_override(c, "optimizer.lr=0.25");
  apply_override(c, "model.hidden=[64, 32, 16]");
  apply_override(c, "train.output_dir=runs/override");
  apply_override(c, "optimizer.nesterov=true");
  apply_override(c, "data.dataset=\"synthetic\"");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.25);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{64, 32, 16}));
  EXPECT_EQ(c.train.output_dir, "runs/override");
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_EQ(c.data.dataset, "synthetic");
  expect_error<ValueError>([&] { apply_override(c, "optimizer.lr"); }, {"key=value"});
  expect_error<ValueError>([&] { apply_override(c, "optimiser.lr=1"); }, {"unknown key 'optimiser.lr'", "'optimizer.lr'"});
  expect_error<ValueError>([&] { apply_override(c, "train.epochs=abc"); }, {"train.epochs", "an integer"});
}

TEST(Config, ValidationNamesTheKey) {
  TrainConfig c;
  c.optimizer.name = "lion";
  expect_error<ValueError>([&] { validate(c); }, {"optimizer.name", "lion", "sgd, adam, adamw"});
  c = TrainConfig();
  c.train.batch_size = 0;
  expect_error<ValueError>([&] { validate(c); }, {"train.batch_size", "positive"});
  c = TrainConfig();
  c.model.name = "transformer";
  expect_error<ValueError>([&] { validate(c); }, {"does not fit"});
}

TEST(Config, CanonicalTomlRoundTrips) {
  TrainConfig c;
  apply_override(c, "model.hidden=[7, 9]");
  apply_override(c, "train.seed=42");
  apply_override(c, "schedule.name=cosine");
  TrainConfig back = parse_config(to_toml(c), "roundtrip");
  EXPECT_EQ(to_toml(back), to_toml(c));
  EXPECT_EQ(back.model.hidden, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(back.train.seed, 42u);
  EXPECT_EQ(known_keys().size(), 42u);
}
