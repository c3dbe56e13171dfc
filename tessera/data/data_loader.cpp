#include "tessera/data/data_loader.h"

#include <algorithm>

#include "tessera/autograd/grad_mode.h"

namespace tessera::data {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const Sampler> sampler,
                       DataLoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(std::move(options)) {
  const std::string& name = options_.name;
  TESSERA_CHECK(dataset_ != nullptr, "[DataLoader] '", name, "' was given no dataset");
  TESSERA_CHECK(sampler_ != nullptr, "[DataLoader] '", name, "' was given no sampler");
  TESSERA_CHECK(options_.batch_size >= 1, "[DataLoader] '", name, "': batch_size must be >= 1, got ", options_.batch_size);
  TESSERA_CHECK(options_.prefetch >= 1, "[DataLoader] '", name, "': prefetch must be >= 1, got ", options_.prefetch);
  TESSERA_CHECK(options_.timeout.count() > 0, "[DataLoader] '", name, "': timeout must be positive, got ",
                options_.timeout.count(), " ms");
}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::start_epoch(int64_t epoch, int64_t start_batch) {
  const int64_t batches = batches_per_epoch();
  TESSERA_CHECK(epoch >= 0, "[DataLoader] '", options_.name, "': epoch must be >= 0, got ", epoch);
  TESSERA_CHECK(start_batch >= 0 && start_batch <= batches, "[DataLoader] '", options_.name, "': start_batch ",
                start_batch, " is outside [0, ", batches, "] for ", sampler_->size(), " samples in batches of ",
                options_.batch_size);
  stop_worker();
  epoch_ = -1;  // until the new epoch is fully set up
  failed_ = nullptr;
  std::vector<int64_t> order = sampler_->indices(epoch);
  TESSERA_CHECK(static_cast<int64_t>(order.size()) == sampler_->size(), "[DataLoader] '", options_.name,
                "': the sampler returned ", order.size(), " indices for epoch ", epoch, " but its size() is ",
                sampler_->size());
  epoch_ = epoch;
  next_batch_ = start_batch;
  end_batch_ = batches;
  if (start_batch < batches) worker_ = std::thread(&DataLoader::run_worker, this, std::move(order), start_batch, batches);
}

// The worker: batches first..end-1 in order, each waiting for room in the queue. It returns at a stop
// request or after queueing an error (the epoch cannot continue past a batch that failed).
void DataLoader::run_worker(std::vector<int64_t> order, int64_t first, int64_t end) {
  NoGradGuard no_grad;  // a dataset that uses tensor ops never records history on this thread
  const int64_t b = options_.batch_size, n = static_cast<int64_t>(order.size());
  for (int64_t k = first; k < end; ++k) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      space_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < options_.prefetch; });
      if (stop_) return;
    }
    if (options_.debug_wedge_at_batch == k) {  // TESSERA_DEBUG_WEDGE=loader:R:B (tests): blocked until a stop
      std::unique_lock<std::mutex> lock(mu_);
      space_.wait(lock, [&] { return stop_; });
      return;
    }
    Item item;
    try {
      const int64_t lo = k * b, hi = std::min(lo + b, n);
      item.batch = dataset_->get_batch(std::vector<int64_t>(order.begin() + lo, order.begin() + hi));
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool failed = item.error != nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      queue_.push_back(std::move(item));
    }
    ready_.notify_one();
    if (failed) return;
  }
}

std::optional<Batch> DataLoader::next() {
  if (failed_) std::rethrow_exception(failed_);
  TESSERA_CHECK(epoch_ >= 0, "[DataLoader] '", options_.name, "': next() called before start_epoch()");
  if (next_batch_ >= end_batch_) {
    stop_worker();  // finished already; joins at once
    return std::nullopt;
  }
  Item item;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!ready_.wait_for(lock, options_.timeout, [&] { return !queue_.empty(); }))
      throw TimeoutError(detail::concat("[DataLoader] '", options_.name, "' waited ", options_.timeout.count(),
                                        " ms for batch ", next_batch_, " of epoch ", epoch_, " (", end_batch_,
                                        " batches per epoch); Dataset::get_batch is stuck or slower than the "
                                        "timeout (DataLoaderOptions::timeout)"));
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  space_.notify_one();
  if (item.error) {
    failed_ = item.error;
    stop_worker();
    std::rethrow_exception(failed_);
  }
  ++next_batch_;
  return std::move(item.batch);
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  space_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
  stop_ = false;
}

}  // namespace tessera::data
