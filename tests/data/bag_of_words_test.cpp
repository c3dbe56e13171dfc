// The bag-of-words set: shapes, ranges, determinism, topics shared by the train and test streams, and
// int64 inputs through the DataLoader.
#include <gtest/gtest.h>

#include <map>

#include "tessera/data/bag_of_words.h"
#include "tessera/data/data_loader.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::data;
using tessera::testing::expect_error;

TEST(BagOfWords, ShapesRangesAndDeterminism) {
  const int64_t vocab = 5000, length = 16, classes = 4;
  auto a = make_bag_of_words(600, vocab, length, classes, 50, 7);
  auto b = make_bag_of_words(600, vocab, length, classes, 50, 7);
  EXPECT_EQ(a->size(), 600);
  EXPECT_EQ(a->inputs().shape(), (Shape{600, length}));
  EXPECT_EQ(a->inputs().dtype(), DType::Int64);
  EXPECT_EQ(a->targets().shape(), (Shape{600}));
  EXPECT_EQ(a->targets().dtype(), DType::Int64);
  EXPECT_EQ(a->inputs().to_vector<int64_t>(), b->inputs().to_vector<int64_t>());
  EXPECT_EQ(a->targets().to_vector<int64_t>(), b->targets().to_vector<int64_t>());
  for (int64_t id : a->inputs().to_vector<int64_t>()) ASSERT_TRUE(id >= 0 && id < vocab) << id;
  std::vector<int> count(classes);
  for (int64_t label : a->targets().to_vector<int64_t>()) {
    ASSERT_TRUE(label >= 0 && label < classes) << label;
    ++count[label];
  }
  for (int c : count) EXPECT_GT(c, 100) << "classes are drawn uniformly";
  EXPECT_NE(a->inputs().to_vector<int64_t>(), make_bag_of_words(600, vocab, length, classes, 50, 8)->inputs().to_vector<int64_t>());
  EXPECT_NE(a->inputs().to_vector<int64_t>(), make_bag_of_words(600, vocab, length, classes, 50, 7, 1)->inputs().to_vector<int64_t>());
  EXPECT_EQ(make_bag_of_words(0, vocab, length, classes, 50, 7)->inputs().shape(), (Shape{0, length}));
}

// Half of each bag comes from its class's topic ids: word counts per class from stream 0 classify
// stream 1 (same seed, other samples) almost perfectly, so the streams are one task.
TEST(BagOfWords, TopicsAreSharedAcrossStreams) {
  const int64_t vocab = 20000, length = 16, classes = 5;
  auto train = make_bag_of_words(2000, vocab, length, classes, 40, 3, 0);
  auto test = make_bag_of_words(500, vocab, length, classes, 40, 3, 1);
  std::map<int64_t, std::vector<int>> counts;  // id -> per-class count
  std::vector<int64_t> x = train->inputs().to_vector<int64_t>(), y = train->targets().to_vector<int64_t>();
  for (size_t i = 0; i < x.size(); ++i) {
    auto& c = counts[x[i]];
    c.resize(classes);
    ++c[y[i / length]];
  }
  x = test->inputs().to_vector<int64_t>();
  y = test->targets().to_vector<int64_t>();
  int correct = 0;
  for (size_t s = 0; s < y.size(); ++s) {
    std::vector<int> score(classes);
    for (int64_t j = 0; j < length; ++j) {
      auto it = counts.find(x[s * length + j]);
      if (it != counts.end())
        for (int64_t c = 0; c < classes; ++c) score[c] += it->second[c];
    }
    correct += std::max_element(score.begin(), score.end()) - score.begin() == y[s];
  }
  EXPECT_GT(correct, 480) << "of 500";
}

TEST(BagOfWords, Int64InputsThroughTheDataLoader) {
  auto ds = make_bag_of_words(100, 1000, 8, 3, 10, 1);
  DataLoader loader(ds, std::make_shared<RandomSampler>(100, 2), {.batch_size = 32, .drop_last = true});
  loader.start_epoch(0);
  int batches = 0;
  while (auto batch = loader.next()) {
    EXPECT_EQ(batch->inputs.dtype(), DType::Int64);
    EXPECT_EQ(batch->inputs.shape(), (Shape{32, 8}));
    EXPECT_EQ(batch->targets.shape(), (Shape{32}));
    ++batches;
  }
  EXPECT_EQ(batches, 3);
}

TEST(BagOfWords, Errors) {
  expect_error<ValueError>([] { make_bag_of_words(-1, 10, 4, 2, 3, 0); }, {"[bag-of-words]", "samples", "-1"});
  expect_error<ValueError>([] { make_bag_of_words(10, 0, 4, 2, 3, 0); }, {"[bag-of-words]", "vocab", "positive"});
  expect_error<ValueError>([] { make_bag_of_words(10, 10, 0, 2, 3, 0); }, {"[bag-of-words]", "bag_length"});
  expect_error<ValueError>([] { make_bag_of_words(10, 10, 4, 2, 0, 0); }, {"[bag-of-words]", "topic_words"});
  expect_error<ValueError>([] { make_bag_of_words(10, 10, 4, 1, 3, 0); }, {"[bag-of-words]", "2 classes", "1"});
}
