// DataLoader: order, drop_last, resumption, prefetch independence, errors from the worker, timeouts
// and shutdown. No sleeps: the blocking dataset waits on a condition variable the test releases.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "tessera/data/data_loader.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::data;
using tessera::testing::bitwise_equal;
using tessera::testing::expect_error;

namespace {

// Sample i: inputs (i, i + 0.5), target i.
std::shared_ptr<TensorDataset> numbered(int64_t n) {
  std::vector<float> x(static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) x[2 * i] = float(i), x[2 * i + 1] = float(i) + 0.5f;
  return std::make_shared<TensorDataset>(from_vector(x, {n, 2}), arange(n));
}

DataLoaderOptions opts(int64_t batch_size, bool drop_last = false, int prefetch = 2) {
  DataLoaderOptions o;
  o.batch_size = batch_size;
  o.drop_last = drop_last;
  o.prefetch = prefetch;
  o.timeout = std::chrono::milliseconds(10000);
  return o;
}

std::vector<Batch> drain(DataLoader& loader) {
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(*b);
  return out;
}

std::vector<int64_t> targets_of(const std::vector<Batch>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) {
    auto t = b.targets.to_vector<int64_t>();
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

// Throws `E` when asked for sample `bad`.
template <typename E>
class FailingDataset : public Dataset {
 public:
  FailingDataset(int64_t n, int64_t bad) : inner_(numbered(n)), bad_(bad) {}
  int64_t size() const override { return inner_->size(); }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    for (int64_t i : indices)
      if (i == bad_) throw E("[test] sample " + std::to_string(i) + " is unreadable");
    return inner_->get_batch(indices);
  }

 private:
  std::shared_ptr<TensorDataset> inner_;
  int64_t bad_;
};

// get_batch blocks until release() — a stuck disk, without sleeping.
class BlockingDataset : public Dataset {
 public:
  int64_t size() const override { return 8; }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return released_; });
    return inner_->get_batch(indices);
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::shared_ptr<TensorDataset> inner_ = numbered(8);
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool released_ = false;
};

}  // namespace

TEST(DataLoader, BatchesFollowTheSamplerOrder) {
  auto ds = numbered(10);
  auto sampler = std::make_shared<RandomSampler>(10, 3);
  DataLoader loader(ds, sampler, opts(4));
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  for (int64_t epoch : {0, 1}) {
    loader.start_epoch(epoch);
    auto batches = drain(loader);
    ASSERT_EQ(batches.size(), 3u);
    EXPECT_EQ(batches[0].inputs.shape(), (Shape{4, 2}));
    EXPECT_EQ(batches[2].inputs.shape(), (Shape{2, 2}));
    EXPECT_EQ(targets_of(batches), sampler->indices(epoch));
    auto x = batches[1].inputs.to_vector<float>();
    auto t = batches[1].targets.to_vector<int64_t>();
    for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(x[2 * i], float(t[i])) << "inputs and targets stay paired";
    EXPECT_FALSE(loader.next().has_value()) << "stays exhausted";
    EXPECT_EQ(loader.next_batch_index(), 3);
    EXPECT_EQ(loader.epoch(), epoch);
  }
}

TEST(DataLoader, DropLast) {
  DataLoader loader(numbered(10), std::make_shared<SequentialSampler>(10), opts(4, true));
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  loader.start_epoch(0);
  EXPECT_EQ(targets_of(drain(loader)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  DataLoader exact(numbered(8), std::make_shared<SequentialSampler>(8), opts(4, false));
  EXPECT_EQ(exact.batches_per_epoch(), 2);
  DataLoader empty(numbered(3), std::make_shared<SequentialSampler>(3), opts(4, true));
  EXPECT_EQ(empty.batches_per_epoch(), 0);
  empty.start_epoch(0);
  EXPECT_FALSE(empty.next().has_value());
}

TEST(DataLoader, ResumeEqualsTheTailOfAFullEpoch) {
  auto ds = numbered(23);
  auto sampler = std::make_shared<RandomSampler>(23, 11);
  DataLoader full(ds, sampler, opts(5));
  full.start_epoch(2);
  auto all = drain(full);
  ASSERT_EQ(all.size(), 5u);
  for (int64_t start : {0, 1, 3, 4, 5}) {
    DataLoader resumed(ds, sampler, opts(5));
    resumed.start_epoch(2, start);
    EXPECT_EQ(resumed.next_batch_index(), start);
    auto tail = drain(resumed);
    ASSERT_EQ(static_cast<int64_t>(tail.size()), 5 - start);
    for (size_t i = 0; i < tail.size(); ++i) {
      EXPECT_TRUE(bitwise_equal(tail[i].inputs, all[start + i].inputs)) << "start " << start << " batch " << i;
      EXPECT_TRUE(bitwise_equal(tail[i].targets, all[start + i].targets));
    }
  }
}

TEST(DataLoader, PrefetchDoesNotChangeTheBatches) {
  auto ds = make_synthetic_classification(300, {3, 5}, 4, 1);
  auto sampler = std::make_shared<RandomSampler>(300, 2);
  DataLoader one(ds, sampler, opts(32, false, 1)), four(ds, sampler, opts(32, false, 4));
  for (int64_t epoch : {0, 1}) {
    one.start_epoch(epoch);
    four.start_epoch(epoch);
    auto a = drain(one), b = drain(four);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(bitwise_equal(a[i].inputs, b[i].inputs)) << "epoch " << epoch << " batch " << i;
      EXPECT_TRUE(bitwise_equal(a[i].targets, b[i].targets));
    }
  }
}

TEST(DataLoader, RestartMidEpoch) {
  auto sampler = std::make_shared<RandomSampler>(50, 4);
  DataLoader loader(numbered(50), sampler, opts(4, false, 3));
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  loader.start_epoch(1);  // the old worker is blocked on a full queue; it must stop cleanly
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(targets_of(drain(loader)), sampler->indices(1));
  loader.start_epoch(0, 12);
  auto last = drain(loader);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].targets.to_vector<int64_t>(), (std::vector<int64_t>{sampler->indices(0)[48], sampler->indices(0)[49]}));
}

TEST(DataLoader, RethrowsTheDatasetsErrorWithItsType) {
  DataLoader loader(std::make_shared<FailingDataset<IoError>>(12, 9), std::make_shared<SequentialSampler>(12), opts(4));
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  ASSERT_TRUE(loader.next().has_value());
  expect_error<IoError>([&] { loader.next(); }, {"[test] sample 9 is unreadable"});
  expect_error<IoError>([&] { loader.next(); }, {"sample 9"});  // the epoch ended at the failure
  EXPECT_EQ(loader.next_batch_index(), 2);
  loader.start_epoch(1, 0);  // a new epoch clears the error
  EXPECT_TRUE(loader.next().has_value());

  DataLoader plain(std::make_shared<FailingDataset<std::runtime_error>>(4, 0), std::make_shared<SequentialSampler>(4),
                   opts(2));
  plain.start_epoch(0);
  expect_error<std::runtime_error>([&] { plain.next(); }, {"sample 0"});
}

TEST(DataLoader, TimesOutNamingLoaderEpochAndBatch) {
  auto ds = std::make_shared<BlockingDataset>();
  DataLoaderOptions o = opts(4);
  o.timeout = std::chrono::milliseconds(50);
  o.name = "blocked";
  DataLoader loader(ds, std::make_shared<SequentialSampler>(8), o);
  loader.start_epoch(3, 1);
  expect_error<TimeoutError>([&] { loader.next(); }, {"[DataLoader]", "'blocked'", "50 ms", "batch 1", "epoch 3"});
  ds->release();
  auto b = loader.next();  // the loader is still usable once the dataset recovers
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->targets.to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 6, 7}));
}

TEST(DataLoader, DestructionMidEpochDoesNotHang) {
  auto done = std::async(std::launch::async, [] {
    auto ds = numbered(1000);
    for (int prefetch : {1, 2, 8}) {
      DataLoader loader(ds, std::make_shared<RandomSampler>(1000, 0), opts(10, false, prefetch));
      loader.start_epoch(0);
      loader.next();
      // destroyed here with a full queue and a worker waiting for room
    }
    DataLoader never_read(ds, std::make_shared<RandomSampler>(1000, 0), opts(10));
    never_read.start_epoch(0);
  });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready);
}

TEST(DataLoader, ValidatesArguments) {
  auto ds = numbered(10);
  auto s = std::make_shared<SequentialSampler>(10);
  expect_error<ValueError>([&] { DataLoader(ds, s, opts(0)); }, {"batch_size", "got 0"});
  expect_error<ValueError>([&] { DataLoader(ds, s, opts(4, false, 0)); }, {"prefetch", "got 0"});
  expect_error<ValueError>([&] { DataLoader(nullptr, s, opts(4)); }, {"no dataset"});
  DataLoader loader(ds, s, opts(4));
  expect_error<ValueError>([&] { loader.next(); }, {"before start_epoch"});
  expect_error<ValueError>([&] { loader.start_epoch(0, 4); }, {"start_batch 4", "[0, 3]"});
  DataLoader wrong(ds, std::make_shared<SequentialSampler>(11), opts(4));
  wrong.start_epoch(0, 2);
  expect_error<IndexError>([&] { wrong.next(); }, {"index 10", "10 samples"});
}
