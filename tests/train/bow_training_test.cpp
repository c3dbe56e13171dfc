// The bow model (EmbeddingBag -> Linear) on the bag-of-words set through the Trainer, and the config
// keys that select them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tessera/nn/embedding_bag.h"
#include "tessera/nn/layers.h"
#include "tessera/train/trainer.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::train;
using tessera::testing::expect_error;
namespace fs = std::filesystem;

namespace {

TrainConfig bow_config(const std::string& name) {
  TrainConfig c;
  c.model.name = "bow";
  c.model.embed_dim = 16;
  c.data.dataset = "bag-of-words";
  c.data.vocab_size = 5000;
  c.data.bag_length = 32;
  c.data.topic_words = 200;
  c.data.samples = 4096;
  c.data.test_samples = 1024;
  c.data.classes = 10;
  // Plain SGD, the update a sparse parameter server applies alike. Each row's gradient carries
  // 1/(batch_size * bag_length), hence the large lr (16: ~96%, 32: ~98%, 64: ~99% after 2 epochs).
  c.optimizer.name = "sgd";
  c.optimizer.lr = 32;
  c.optimizer.momentum = 0.0;
  c.train.epochs = 2;
  c.train.batch_size = 64;
  c.train.log_every = 1000;
  fs::path dir = fs::path(::testing::TempDir()) / ("tessera_bow_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  c.train.output_dir = dir.string();
  return c;
}

}  // namespace

TEST(BowTraining, BuildsEmbeddingBagThenLinear) {
  TrainConfig c = bow_config("build");
  auto model = std::dynamic_pointer_cast<nn::Sequential>(build_model(c, 0));
  ASSERT_TRUE(model);
  ASSERT_EQ(model->size(), 2u);
  auto bag = std::dynamic_pointer_cast<nn::EmbeddingBag>((*model)[0]);
  ASSERT_TRUE(bag);
  EXPECT_EQ(bag->weight.shape(), (Shape{5000, 16}));
  auto head = std::dynamic_pointer_cast<nn::Linear>((*model)[1]);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->weight.shape(), (Shape{10, 16}));
  std::vector<std::string> names;
  for (auto& [n, t] : model->state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "1.weight", "1.bias"}));
}

TEST(BowTraining, LearnsBagOfWordsWellAboveChance) {
  // Observed: test accuracy 0.977, 0.980, 0.984 for train.seed 0, 1, 2 (chance 0.10).
  FitResult r = Trainer(bow_config("learn")).fit();
  ASSERT_TRUE(r.last_eval.has_value());
  EXPECT_EQ(r.last_eval->samples, 1024);
  EXPECT_GT(r.last_eval->accuracy, 0.85) << "10 classes: chance is 0.1";
}

TEST(BowTraining, ConfigKeysParseValidateAndRoundTrip) {
  TrainConfig c = parse_config(R"(
[model]
name = "bow"
embed_dim = 30
[data]
dataset = "bag-of-words"
vocab_size = 1000000
bag_length = 12
topic_words = 50
)", "bow.toml");
  EXPECT_EQ(c.data.vocab_size, 1000000);
  EXPECT_EQ(c.data.bag_length, 12);
  EXPECT_EQ(c.data.topic_words, 50);
  validate(c);  // embed_dim 30 is not a multiple of model.heads 4: only the transformer cares
  TrainConfig back = parse_config(to_toml(c), "roundtrip");
  EXPECT_EQ(back.model.name, "bow");
  EXPECT_EQ(back.data.dataset, "bag-of-words");
  EXPECT_EQ(back.data.vocab_size, 1000000);
  EXPECT_EQ(back.data.bag_length, 12);
  EXPECT_EQ(back.data.topic_words, 50);

  TrainConfig defaults;
  EXPECT_EQ(defaults.data.vocab_size, 100000);
  EXPECT_EQ(defaults.data.bag_length, 32);
  EXPECT_EQ(defaults.data.topic_words, 200);

  TrainConfig bad = c;
  bad.data.dataset = "synthetic";
  expect_error<ValueError>([&] { validate(bad); }, {"model.name = 'bow'", "data.dataset = 'synthetic'", "does not fit"});
  bad = TrainConfig();
  bad.data.dataset = "bag-of-words";
  expect_error<ValueError>([&] { validate(bad); }, {"model.name = 'mlp'", "data.dataset = 'bag-of-words'"});
  for (const char* key : {"data.vocab_size", "data.bag_length", "data.topic_words"}) {
    bad = c;
    apply_override(bad, std::string(key) + "=0");
    expect_error<ValueError>([&] { validate(bad); }, {key, "positive"});
  }
  bad = c;
  bad.data.classes = 1;
  expect_error<ValueError>([&] { validate(bad); }, {"data.classes", "at least 2"});
}
