// Deferred weight gradients: the split backward of zero-bubble pipeline schedules (Qi et al. 2023,
// parallel/pipeline/schedule.h).
//
// A layer's backward computes two kinds of gradient: with respect to its input (B), which the
// previous pipeline stage waits for, and with respect to its weights (W), which nothing waits for
// until the optimizer step. Running W later lets it fill time a stage would otherwise sit idle.
// While a DeferWeightGrads scope is active on a thread, ops whose weight gradient is a product of
// its own (linear, ops/matmul.cpp) compute the input gradient at once and queue a closure that
// computes the weight and bias gradients and accumulates them into the leaves (with their
// grad-ready hooks) when the queue is run. Other parameters (norms, embeddings) get their gradients
// in B, as in Megatron's zero-bubble implementation, which defers the linear layers' weight
// products alone.
//
// Only weights that are leaves are deferred (a weight computed by another op passes its gradient on
// through the graph, which has been released by then), so a deferred run accumulates exactly the
// gradients an ordinary backward does, in another order.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

class Node;

class WeightGradQueue {
 public:
  void push(std::function<void()> work) { work_.push_back(std::move(work)); }
  // Runs the queued weight gradients in the order queued (without recording) and empties the queue.
  void run();
  size_t size() const { return work_.size(); }
  bool empty() const { return work_.empty(); }

 private:
  std::vector<std::function<void()>> work_;
};

// Installs `queue` as this thread's destination for deferred weight gradients; restores the outer
// one when it ends.
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(WeightGradQueue& queue);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;

 private:
  WeightGradQueue* outer_;
};

// The queue installed on this thread, or null (then backward computes every gradient at once).
WeightGradQueue* deferred_weight_grads();

// Where a deferred gradient of `t` goes: its AccumulateGrad node when t is a leaf that requires
// grad, else null (t's gradient cannot be deferred). Ops take it at forward time.
std::shared_ptr<Node> deferrable_sink(const Tensor& t);

}  // namespace tessera::autograd
