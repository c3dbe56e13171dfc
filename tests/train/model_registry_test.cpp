// The model registry (train/model_registry.h): every model.name is one entry that validation, the
// builders, the trainer and serving ask; a model and a dataset that do not fit are refused with
// both lists; and each entry builds a model that takes the samples of the datasets it names.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tessera/ops/ops.h"
#include "tessera/train/builders.h"
#include "tessera/train/config.h"
#include "tessera/train/model_registry.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::train;
using tessera::testing::expect_error;

TEST(ModelRegistry, EveryNameHasOneEntryAndAnUnknownNameListsThem) {
  const std::vector<std::string> names = model_names();
  EXPECT_EQ(names, (std::vector<std::string>{"mlp", "cnn", "transformer", "bow", "logistic", "linear", "milnce"}));
  for (const std::string& name : names) {
    const ModelEntry& e = model_entry(name);
    EXPECT_EQ(e.name, name);
    EXPECT_FALSE(e.datasets.empty()) << name;
    EXPECT_TRUE(e.build) << name;
  }
  expect_error<ValueError>([] { model_entry("resnet"); },
                           {"model.name = 'resnet' is not one of: mlp, cnn, transformer, bow, logistic, linear, milnce"});
}

TEST(ModelRegistry, AModelAndADatasetThatDoNotFitAreRefusedWithBothLists) {
  TrainConfig c;
  c.model.name = "cnn";
  c.data.dataset = "csv";
  c.data.test_path = "t.csv";
  expect_error<ValueError>([&] { validate(c); }, {"model.name = 'cnn' does not fit data.dataset = 'csv'",
                                                  "cnn trains on fashion-mnist, synthetic, image-folder",
                                                  "csv trains mlp, logistic, linear"});
  // Every entry's datasets pass the same check.
  for (const std::string& name : model_names())
    for (const std::string& dataset : model_entry(name).datasets) {
      TrainConfig fits;
      fits.model.name = name;
      fits.data.dataset = dataset;
      fits.data.test_path = "t.csv";
      try {
        validate(fits);
      } catch (const ValueError& e) {
        EXPECT_EQ(std::string(e.what()).find("does not fit"), std::string::npos) << name << " on " << dataset;
      }
    }
}

// What each entry builds takes one sample of its inputs and gives its outputs: the classes, or one
// number for a regression.
TEST(ModelRegistry, EachEntryBuildsAModelOfItsInputsAndOutputs) {
  struct Case {
    std::string name, dataset;
    Tensor sample;
    int64_t outputs;
  };
  TrainConfig base;
  base.data.classes = 3;
  base.model.input_dim = 6;
  base.data.vocab_size = 50;
  std::vector<Case> cases{{"mlp", "synthetic", randn({2, 6}), 3},
                          {"cnn", "fashion-mnist", randn({2, 1, 28, 28}), 10},
                          {"bow", "bag-of-words", zeros({2, 4}, DType::Int64), 3},
                          {"logistic", "csv", randn({2, 6}), 3},
                          {"linear", "csv", randn({2, 6}), 1}};
  for (const Case& k : cases) {
    TrainConfig c = base;
    c.model.name = k.name;
    c.data.dataset = k.dataset;
    auto model = build_model(c, 0);
    NoGradGuard no_grad;
    const Tensor out = model->forward(k.sample);
    EXPECT_EQ(out.shape(), (Shape{2, k.outputs})) << k.name;
  }
  TrainConfig lm = base;
  lm.model.name = "transformer";
  lm.data.dataset = "text";
  lm.model.embed_dim = 16, lm.model.heads = 2, lm.model.layers = 1, lm.model.context = 8;
  NoGradGuard no_grad;
  EXPECT_EQ(build_model(lm, 11)->forward(zeros({2, 8}, DType::Int64)).shape(), (Shape{2, 8, 11}));
  EXPECT_FALSE(model_entry("transformer").reports_accuracy);
  EXPECT_TRUE(model_entry("linear").regression);
  EXPECT_TRUE(model_entry("milnce").objective);
}
