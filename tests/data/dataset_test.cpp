// TensorDataset, the synthetic set, and the Fashion-MNIST loader on the real files
// (/usr/share/datasets/fashion-mnist, from Debian's dataset-fashion-mnist, which scripts/setup.sh installs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "tessera/data/dataset.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::data;
using tessera::testing::expect_error;
namespace fs = std::filesystem;

namespace {

const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

std::string fresh_dir(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("tessera_data_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write_idx(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b{0, 0, 8, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) b.insert(b.end(), {uint8_t(d >> 24), uint8_t(d >> 16), uint8_t(d >> 8), uint8_t(d)});
  b.insert(b.end(), data.begin(), data.end());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}

}  // namespace

TEST(TensorDataset, GathersRowsOfAnyDtype) {
  Tensor x = from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  Tensor y = from_vector(std::vector<int64_t>{10, 11, 12, 13}, {4});
  TensorDataset ds(x, y);
  EXPECT_EQ(ds.size(), 4);
  Batch b = ds.get_batch({3, 0, 3});
  EXPECT_EQ(b.inputs.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.inputs.to_vector<float>(), (std::vector<float>{6, 7, 0, 1, 6, 7}));
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{13, 10, 13}));
  Batch none = ds.get_batch({});
  EXPECT_EQ(none.inputs.shape(), (Shape{0, 2}));

  TensorDataset half(x.to(DType::BFloat16), y);
  EXPECT_EQ(half.get_batch({2}).inputs.to(DType::Float32).to_vector<float>(), (std::vector<float>{4, 5}));
}

TEST(TensorDataset, NonContiguousInputsAreStoredContiguous) {
  Tensor x = from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3}).transpose(0, 1);  // (3, 2)
  TensorDataset ds(x, arange(3));
  EXPECT_EQ(ds.get_batch({1}).inputs.to_vector<float>(), (std::vector<float>{1, 4}));
}

TEST(TensorDataset, Errors) {
  expect_error<ValueError>([] { TensorDataset(zeros({4, 2}), arange(3)); }, {"[TensorDataset]", "[4, 2]", "[3]"});
  expect_error<ValueError>([] { TensorDataset(scalar_tensor(1), arange(1)); }, {"[TensorDataset]", "first"});
  TensorDataset ds(zeros({4, 2}), arange(4));
  expect_error<IndexError>([&] { ds.get_batch({0, 4}); }, {"[TensorDataset]", "index 4", "4 samples"});
  expect_error<IndexError>([&] { ds.get_batch({-1}); }, {"index -1"});
}

TEST(SyntheticClassification, ShapesDeterminismAndBalance) {
  auto a = make_synthetic_classification(600, {1, 4, 4}, 3, 7);
  auto b = make_synthetic_classification(600, {1, 4, 4}, 3, 7);
  EXPECT_EQ(a->inputs().shape(), (Shape{600, 1, 4, 4}));
  EXPECT_EQ(a->targets().dtype(), DType::Int64);
  EXPECT_EQ(a->inputs().to_vector<float>(), b->inputs().to_vector<float>());
  EXPECT_EQ(a->targets().to_vector<int64_t>(), b->targets().to_vector<int64_t>());
  std::vector<int> count(3);
  for (int64_t label : a->targets().to_vector<int64_t>()) {
    ASSERT_TRUE(label >= 0 && label < 3);
    ++count[label];
  }
  for (int c : count) EXPECT_GT(c, 60) << "class balance";
  auto other = make_synthetic_classification(600, {1, 4, 4}, 3, 8);
  EXPECT_NE(a->inputs().to_vector<float>(), other->inputs().to_vector<float>());
  auto test = make_synthetic_classification(600, {1, 4, 4}, 3, 7, /*stream=*/1);
  EXPECT_NE(a->inputs().to_vector<float>(), test->inputs().to_vector<float>());
}

// The labels are an affine function of the inputs: a multi-class perceptron (with a bias) trained on
// stream 0 classifies stream 1 (same seed, other samples) almost perfectly, so the two streams are
// one task, and a model can fit it.
TEST(SyntheticClassification, IsLearnableAndSharedAcrossStreams) {
  const int64_t d = 8, k = 4;
  auto train = make_synthetic_classification(2000, {d}, k, 3, 0);
  auto test = make_synthetic_classification(500, {d}, k, 3, 1);
  std::vector<double> w(k * (d + 1), 0.0);  // (k, d + 1); the last column is the bias
  auto predict = [&](const float* row) {
    int64_t best = 0;
    double best_s = -1e300;
    for (int64_t c = 0; c < k; ++c) {
      double s = w[c * (d + 1) + d];
      for (int64_t f = 0; f < d; ++f) s += w[c * (d + 1) + f] * row[f];
      if (s > best_s) best = c, best_s = s;
    }
    return best;
  };
  std::vector<float> x = train->inputs().to_vector<float>();
  std::vector<int64_t> y = train->targets().to_vector<int64_t>();
  for (int epoch = 0; epoch < 20; ++epoch)
    for (int64_t i = 0; i < 2000; ++i) {
      const float* row = x.data() + i * d;
      int64_t p = predict(row);
      if (p == y[i]) continue;
      for (int64_t f = 0; f < d; ++f) w[y[i] * (d + 1) + f] += row[f], w[p * (d + 1) + f] -= row[f];
      w[y[i] * (d + 1) + d] += 1, w[p * (d + 1) + d] -= 1;
    }
  std::vector<float> tx = test->inputs().to_vector<float>();
  std::vector<int64_t> ty = test->targets().to_vector<int64_t>();
  int correct = 0;
  for (int64_t i = 0; i < 500; ++i) correct += predict(tx.data() + i * d) == ty[i];
  EXPECT_GT(correct, 450) << "held-out accuracy of a linear model";
}

class FashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    train_ = load_fashion_mnist(kFashionDir, "train");
    test_ = load_fashion_mnist(kFashionDir, "test");
  }
  static void TearDownTestSuite() { train_.reset(), test_.reset(); }
  static std::shared_ptr<TensorDataset> train_, test_;
};
std::shared_ptr<TensorDataset> FashionMnist::train_, FashionMnist::test_;

TEST_F(FashionMnist, ShapesAndLabels) {
  ASSERT_TRUE(train_ && test_);
  EXPECT_EQ(train_->inputs().shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(train_->targets().shape(), (Shape{60000}));
  EXPECT_EQ(test_->inputs().shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(test_->inputs().dtype(), DType::Float32);
  EXPECT_EQ(test_->targets().dtype(), DType::Int64);
  const int64_t* y = train_->targets().data<int64_t>();
  EXPECT_EQ(y[0], 9);  // "Ankle boot", as in every Fashion-MNIST tutorial
  EXPECT_EQ(y[1], 0);
  EXPECT_EQ(test_->targets().data<int64_t>()[0], 9);
  std::vector<int64_t> count(10);
  for (int64_t i = 0; i < 60000; ++i) {
    ASSERT_TRUE(y[i] >= 0 && y[i] < 10) << i;
    ++count[y[i]];
  }
  for (int64_t c : count) EXPECT_EQ(c, 6000);  // the training set is balanced
}

TEST_F(FashionMnist, PixelsAreNormalised) {
  const float* p = train_->inputs().data<float>();
  const int64_t n = train_->inputs().numel();
  double sum = 0, sq = 0;
  float lo = p[0], hi = p[0];
  for (int64_t i = 0; i < n; ++i) sum += p[i], sq += double(p[i]) * p[i], lo = std::min(lo, p[i]), hi = std::max(hi, p[i]);
  const double mean = sum / n, stddev = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(stddev, 1.0, 0.01);
  EXPECT_FLOAT_EQ(lo, (0.0f - kFashionMnistMean) / kFashionMnistStd);
  EXPECT_FLOAT_EQ(hi, (1.0f - kFashionMnistMean) / kFashionMnistStd);
}

TEST(FashionMnistFiles, PlainFilesAndExactValues) {
  std::string dir = fresh_dir("mnist_plain");
  std::vector<uint8_t> pixels(2 * 28 * 28, 0);
  pixels[1] = 255;
  pixels[28 * 28] = 51;
  write_idx(dir + "/t10k-images-idx3-ubyte", {2, 28, 28}, pixels);
  write_idx(dir + "/t10k-labels-idx1-ubyte", {2}, {3, 7});
  auto ds = load_fashion_mnist(dir, "test");
  Batch b = ds->get_batch({0, 1});
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{3, 7}));
  const float* x = b.inputs.data<float>();
  EXPECT_FLOAT_EQ(x[0], -kFashionMnistMean / kFashionMnistStd);
  EXPECT_FLOAT_EQ(x[1], (1.0f - kFashionMnistMean) / kFashionMnistStd);
  EXPECT_FLOAT_EQ(x[28 * 28], (0.2f - kFashionMnistMean) / kFashionMnistStd);
}

TEST(FashionMnistFiles, Errors) {
  std::string dir = fresh_dir("mnist_bad");
  expect_error<IoError>([&] { load_fashion_mnist(dir, "train"); },
                        {"train-images-idx3-ubyte.gz", dir.c_str(), "apt-get install dataset-fashion-mnist", "data.dir"});
  write_idx(dir + "/train-images-idx3-ubyte", {3, 28, 28}, std::vector<uint8_t>(3 * 28 * 28));
  write_idx(dir + "/train-labels-idx1-ubyte", {2}, {1, 2});
  expect_error<IoError>([&] { load_fashion_mnist(dir, "train"); },
                        {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "3 images", "2 labels"});
  expect_error<ValueError>([&] { load_fashion_mnist(dir, "validation"); }, {"split", "validation"});
}
