#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tessera/train/config.h"
#include "testing/expect.h"
#include "testing/temp_dir.h"

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

TEST(Config, AHugeUnknownKeyIsRefusedWithItsStartAndLengthNotASuggestion) {
  const std::string key(70000, 'k');
  try {
    parse_config("[train]\n" + key + " = 1\n", "a.toml");
    FAIL() << "a 70000-character unknown key was accepted";
  } catch (const ValueError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("(70006 characters) in a.toml"), std::string::npos) << message;
    EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
    EXPECT_LT(message.size(), 200u) << "the message echoes the whole key";
  }
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

TEST(Config, SequenceParallelNeedsTensorParallelismAndWholeTokenShares) {
  TrainConfig c;
  c.model.name = "transformer";
  c.data.dataset = "text";
  c.parallel.sequence_parallel = true;
  expect_error<ValueError>([&] { validate(c); }, {"parallel.sequence_parallel", "parallel.tp > 1"});
  c.parallel.tp = 3;
  c.model.heads = 3;
  expect_error<ValueError>([&] { validate(c); }, {"model.context 64", "multiple of parallel.tp 3"});
  c.parallel.tp = 2;
  c.model.heads = 4;
  validate(c);
  c.parallel.tp_overlap_chunks = 0;
  expect_error<ValueError>([&] { validate(c); }, {"parallel.tp_overlap_chunks"});
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
  // Every declared key is written out (its leaf name appears under its section).
  std::string text = to_toml(c);
  for (const auto& key : known_keys()) {
    std::string section = key.substr(0, key.find('.')), leaf = key.substr(key.find('.') + 1);
    EXPECT_NE(text.find("[" + section + "]"), std::string::npos) << key;
    EXPECT_NE(text.find(leaf + " = "), std::string::npos) << key;
  }
  apply_override(c, "distributed.comm_hook=bf16");
  EXPECT_EQ(parse_config(to_toml(c), "roundtrip").distributed.comm_hook, "bf16");
}

namespace {

// Loads `path` (and validates what loads): either it works, or a ValueError / IoError names the file
// (or, from validate, the key). Anything else, another exception type or a crash, fails the test.
void expect_loads_or_names_the_file(const std::string& path) {
  TrainConfig config;
  try {
    config = load_config(path);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "load_config(" << path << ") threw another type: " << e.what();
    return;
  }
  try {
    validate(config);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[config]"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "validate after load_config(" << path << ") threw another type: " << e.what();
  }
}

std::vector<std::string> example_configs() {
  std::vector<std::string> texts;
  for (const char* name : {"mlp.toml", "cnn.toml", "char_lm.toml", "bow.toml", "mlp_ps.toml"})
    texts.push_back(tessera::testing::read_text(std::string(TESSERA_SOURCE_DIR) + "/examples/" + name));
  return texts;
}

std::string write_config(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace

// The example configs cut at every sixteenth of their length (k = 0..15).
TEST(Config, ATruncatedConfigLoadsOrNamesTheFile) {
  const std::string dir = tessera::testing::fresh_dir("config", "truncated");
  for (const std::string& text : example_configs()) {
    ASSERT_FALSE(text.empty());
    expect_loads_or_names_the_file(write_config(dir, "whole.toml", text));
    for (size_t k = 0; k < 16; ++k) {
      SCOPED_TRACE(std::to_string(k) + "/16 of\n" + text);
      expect_loads_or_names_the_file(write_config(dir, "cut.toml", text.substr(0, text.size() * k / 16)));
    }
  }
}

// One byte changed at every position of each example (three ways: a low bit, a case bit, the top bit,
// which makes invalid UTF-8).
TEST(Config, AFlippedByteLoadsOrNamesTheFile) {
  const std::string dir = tessera::testing::fresh_dir("config", "flipped");
  for (const std::string& text : example_configs()) {
    for (size_t at = 0; at < text.size(); ++at) {
      for (char mask : {'\x01', '\x20', '\x80'}) {
        std::string flipped = text;
        flipped[at] = static_cast<char>(flipped[at] ^ mask);
        SCOPED_TRACE("byte " + std::to_string(at) + " ^ " + std::to_string(static_cast<unsigned char>(mask)));
        expect_loads_or_names_the_file(write_config(dir, "flipped.toml", flipped));
      }
    }
  }
}

TEST(Config, AMissingConfigIsAnIoErrorNamingIt) {
  const std::string path = tessera::testing::fresh_dir("config", "missing") + "/absent.toml";
  expect_error<IoError>([&] { load_config(path); }, {path.c_str()});
}
