#include "tessera/optim/sgd.h"

#include "tessera/util/thread_pool.h"

namespace tessera::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : Optimizer(std::move(params), o.lr), options(o) {
  TESSERA_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "[SGD] momentum and weight_decay must be >= 0");
  TESSERA_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "[SGD] Nesterov needs momentum > 0 and dampening 0");
}

// The update is elementwise, so each parameter's is split across the intra-op threads: with 2
// threads it was a single-threaded 6% of the MLP's training step (perf, bench train-step) while
// the other thread waited.
void SGD::step() {
  const float lr = static_cast<float>(lr_), mu = static_cast<float>(options.momentum),
              wd = static_cast<float>(options.weight_decay), damp = static_cast<float>(options.dampening);
  const bool nesterov = options.nesterov;
  constexpr int64_t kGrain = 32768;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g_t = gradient_to_apply(i);
    if (!g_t.defined()) continue;
    float* p = params_[i].data<float>();
    const float* g = g_t.data<float>();
    const int64_t n = params_[i].numel();
    if (mu == 0.0f) {
      parallel_for(0, n, kGrain, [=](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) p[k] -= lr * (g[k] + wd * p[k]);
      });
      continue;
    }
    // torch initialises the buffer with the first gradient (no dampening on that step).
    const bool fresh = !has_state(i, "momentum_buffer");
    float* buf = state(i, "momentum_buffer").data<float>();
    parallel_for(0, n, kGrain, [=](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        float d = g[k] + wd * p[k];
        buf[k] = fresh ? d : mu * buf[k] + (1.0f - damp) * d;
        float update = nesterov ? d + mu * buf[k] : buf[k];
        p[k] -= lr * update;
      }
    });
  }
  ++step_count_;
}

}  // namespace tessera::optim
