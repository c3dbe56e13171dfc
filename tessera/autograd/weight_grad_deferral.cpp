#include "tessera/autograd/weight_grad_deferral.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"

namespace tessera::autograd {

namespace {
thread_local WeightGradQueue* installed_queue = nullptr;
}  // namespace

void WeightGradQueue::run() {
  NoGradGuard no_grad;  // weight gradients are not recorded, as in backward
  std::vector<std::function<void()>> work;
  work.swap(work_);
  for (auto& w : work) w();
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue& queue) : outer_(installed_queue) { installed_queue = &queue; }

DeferWeightGrads::~DeferWeightGrads() { installed_queue = outer_; }

WeightGradQueue* deferred_weight_grads() { return installed_queue; }

std::shared_ptr<Node> deferrable_sink(const Tensor& t) {
  if (!t.defined() || t.impl()->grad_fn || !t.requires_grad()) return nullptr;
  return gradient_edge(t);
}

}  // namespace tessera::autograd
