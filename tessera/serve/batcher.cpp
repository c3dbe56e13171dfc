#include "tessera/serve/batcher.h"

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"
#include "tessera/util/thread_pool.h"

namespace tessera::serve {

DynamicBatcher::DynamicBatcher(BatcherOptions options, std::function<Tensor(const Tensor&)> run,
                               std::function<void(int64_t)> on_batch)
    : options_(options), run_(std::move(run)), on_batch_(std::move(on_batch)) {
  TESSERA_CHECK(options_.max_batch >= 1, "[serve] max batch must be at least 1, got ", options_.max_batch);
  TESSERA_CHECK(options_.max_wait.count() >= 0, "[serve] max wait must not be negative");
  thread_ = std::thread([this] { loop(); });
}

DynamicBatcher::~DynamicBatcher() { stop(); }

void DynamicBatcher::announce() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++announced_;
}

void DynamicBatcher::withdraw() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --announced_;
  }
  arrived_.notify_one();
}

std::future<Tensor> DynamicBatcher::submit(Tensor rows, bool announced) {
  Pending p{std::move(rows), {}, std::chrono::steady_clock::now()};
  std::future<Tensor> f = p.reply.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (announced) --announced_;
    if (!p.rows.defined() || p.rows.dim() < 1 || p.rows.shape()[0] < 1) {
      p.reply.set_exception(std::make_exception_ptr(ValueError("[serve] a request must hold at least one sample")));
      return f;
    }
    if (stopping_) {
      p.reply.set_exception(std::make_exception_ptr(ValueError("[serve] the server is shutting down")));
      return f;
    }
    queue_.push_back(std::move(p));
  }
  arrived_.notify_one();
  return f;
}

void DynamicBatcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  arrived_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<DynamicBatcher::Pending> DynamicBatcher::next_batch(std::unique_lock<std::mutex>& lock) {
  arrived_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  std::vector<Pending> batch;
  if (queue_.empty()) return batch;
  const auto deadline = queue_.front().arrived + options_.max_wait;
  int64_t samples = 0;
  while (true) {
    while (!queue_.empty()) {
      const int64_t n = queue_.front().rows.shape()[0];
      if (!batch.empty() && samples + n > options_.max_batch) return batch;  // the next batch's head
      samples += n;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
      if (samples >= options_.max_batch) return batch;
    }
    // Room left: wait for more until the oldest request's deadline (no wait while stopping, nor,
    // adaptive, when no announced request is on its way).
    auto nothing_coming = [&] { return options_.adaptive && announced_ <= 0; };
    if (stopping_ || nothing_coming()) return batch;
    if (!arrived_.wait_until(lock, deadline, [&] { return stopping_ || !queue_.empty() || nothing_coming(); }))
      return batch;
    if (queue_.empty()) return batch;
  }
}

void DynamicBatcher::loop() {
  adopt_num_threads();  // the model runs on this thread
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    std::vector<Pending> batch = next_batch(lock);
    if (batch.empty()) return;  // stopping and drained
    lock.unlock();
    int64_t samples = 0;
    std::vector<Tensor> parts;
    for (auto& p : batch) {
      parts.push_back(p.rows);
      samples += p.rows.shape()[0];
    }
    // Counted before any reply goes out: a client that reads /metrics after its answer sees its batch.
    if (on_batch_) on_batch_(samples);
    Tensor out;
    try {
      out = run_(parts.size() == 1 ? parts[0] : cat(parts, 0));
      TESSERA_CHECK(out.dim() >= 1 && out.shape()[0] == samples, "[serve] the model answered ", shape_str(out.shape()),
                    " for a batch of ", samples, " samples");
    } catch (...) {
      for (auto& p : batch) p.reply.set_exception(std::current_exception());
      out = Tensor();
    }
    if (out.defined()) {
      int64_t row = 0;
      for (auto& p : batch) {
        const int64_t n = p.rows.shape()[0];
        p.reply.set_value(out.slice(0, row, row + n));
        row += n;
      }
    }
    lock.lock();
  }
}

}  // namespace tessera::serve
