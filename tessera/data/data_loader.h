// DataLoader: batches of a Dataset in a Sampler's order, assembled on one background thread while the
// training thread computes, so data loading overlaps the step (as PyTorch's DataLoader with workers).
// A single worker assembles the batches in order, so the batches are identical bitwise whatever
// `prefetch` is: prefetch bounds memory and buys overlap, never changes the data.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/data/sampler.h"

namespace tessera::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool drop_last = false;  // drop the epoch's last, smaller batch
  int prefetch = 2;        // batches assembled ahead of next(), >= 1
  std::chrono::milliseconds timeout{120000};  // how long next() waits for one batch
  std::string name = "data";  // names the loader in errors ("train", "eval", ...)
  // Tests of the wedge watch (util/debug_wedge.h): the worker blocks before this batch of each
  // epoch until the loader stops, as a deadlocked loader would.
  std::optional<int64_t> debug_wedge_at_batch;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const Sampler> sampler, DataLoaderOptions options);
  // Stops and joins the worker. The worker checks for a stop between batches, so this waits at most
  // for the one Dataset::get_batch in progress.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t batches_per_epoch() const;
  // Starts (or restarts, stopping the previous worker) epoch `epoch` at batch `start_batch` in
  // [0, batches_per_epoch()]. Resumption skips the batches already consumed without assembling them:
  // the sampler's order depends on the epoch alone, so batch k is the same whether or not 0..k-1 ran.
  void start_epoch(int64_t epoch, int64_t start_batch = 0);
  // The next batch, or std::nullopt after the epoch's last one. Waits at most options.timeout, then
  // throws TimeoutError naming the loader, epoch and batch. An exception thrown on the worker (by the
  // dataset) is rethrown here with its own type; the epoch ends there (later calls rethrow it again
  // until start_epoch). Call from one thread.
  std::optional<Batch> next();

  // The data-order state a checkpoint saves: resuming with start_epoch(epoch(), next_batch_index())
  // continues exactly where this loader is.
  int64_t epoch() const { return epoch_; }
  int64_t next_batch_index() const { return next_batch_; }

 private:
  struct Item {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  void stop_worker();
  void run_worker(std::vector<int64_t> order, int64_t first, int64_t end);

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const Sampler> sampler_;
  DataLoaderOptions options_;
  int64_t epoch_ = -1, next_batch_ = 0, end_batch_ = 0;
  std::exception_ptr failed_;  // the worker's error, once it has been rethrown by next()

  std::mutex mu_;
  std::condition_variable ready_;  // an item was queued (next() waits on it)
  std::condition_variable space_;  // an item was taken, or stop (the worker waits on it)
  std::deque<Item> queue_;         // at most options_.prefetch items
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace tessera::data
