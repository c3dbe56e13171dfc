// Dynamic batching: requests queue, and one thread runs them together, up to `max_batch` samples or
// until `max_wait` has passed since the oldest arrived, whichever comes first (Triton's and Ray
// Serve's rule). A request of more samples than max_batch runs alone; one that does not fit beside
// the queue's head waits for the next batch, so requests run in arrival order. Each request gets its
// own rows of the batch's output back, or the batch's exception.
//
// Adaptive waiting (options.adaptive): the server announces each request as it starts reading it, and
// the batch is also cut when no announced request is still on its way to the queue: waiting then
// could only add latency, as nothing is coming. One client then waits for nobody (0.5 ms instead of
// max_wait), and under load batches still fill, since requests are read while the model runs.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "tessera/core/tensor.h"

namespace tessera::serve {

struct BatcherOptions {
  int64_t max_batch = 32;                      // samples; 1 turns batching off
  std::chrono::microseconds max_wait{5000};    // after the oldest queued request arrived
  bool adaptive = false;                       // also cut the batch when nothing announced is coming
};

class DynamicBatcher {
 public:
  // `run`: [n, ...] -> [n, ...], called on the batcher's thread only. `on_batch(samples)` as each batch
  // starts, before any of its replies.
  DynamicBatcher(BatcherOptions options, std::function<Tensor(const Tensor&)> run,
                 std::function<void(int64_t samples)> on_batch = {});
  ~DynamicBatcher();  // stop()
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // `rows`: [n, ...] with n >= 1. The future holds [n, ...], or the exception the batch ended in.
  // After stop(), or for rows without a sample: a future holding a ValueError.
  std::future<Tensor> submit(Tensor rows, bool announced = false);
  // A request the server began to read (adaptive waiting): submit(rows, true) or withdraw() ends it.
  void announce();
  void withdraw();
  // Runs what is queued, then ends the thread. Idempotent.
  void stop();

 private:
  struct Pending {
    Tensor rows;
    std::promise<Tensor> reply;
    std::chrono::steady_clock::time_point arrived;
  };
  void loop();
  std::vector<Pending> next_batch(std::unique_lock<std::mutex>& lock);

  BatcherOptions options_;
  std::function<Tensor(const Tensor&)> run_;
  std::function<void(int64_t)> on_batch_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  int64_t announced_ = 0;  // announced, not yet submitted or withdrawn
  std::thread thread_;
};

}  // namespace tessera::serve
