// The fused optimizer updates: the arithmetic over arrays (optimizer_update.h), and the CPU table's
// entries, which split a parameter across the intra-op threads where the update is elementwise.
// With 2 threads a single-threaded SGD update was 6% of the MLP's training step (perf, bench
// train-step) while the other thread waited.
#include "tessera/backend/cpu/cpu_kernels.h"
#include "tessera/backend/cpu/optimizer_update.h"
#include "tessera/ops/optimizer_formulas.h"
#include "tessera/util/thread_pool.h"

namespace tessera::cpu {

// The elements' formulas are ops/optimizer_formulas.h's; the loops split on the buffer so that
// each inlines to one straight, vectorisable body.
void sgd_update(float* p, const float* g, float* buf, int64_t n, const SgdStep& s) {
  const SgdStep c = s;
  if (buf == nullptr) {
    for (int64_t k = 0; k < n; ++k) sgd_element(p[k], g[k], nullptr, c);
    return;
  }
  for (int64_t k = 0; k < n; ++k) sgd_element(p[k], g[k], buf + k, c);
}

void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s) {
  const AdamStep c = s;
  for (int64_t k = 0; k < n; ++k) adam_element(p[k], g[k], m[k], v[k], c);
}

std::pair<double, double> lamb_moments(const float* p, const float* g, float* m, float* v, int64_t n,
                                       const LambStep& s) {
  const LambStep c = s;
  double w_sq = 0.0, u_sq = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    lamb_moments_element(g[k], m[k], v[k], c);
    const float u = lamb_direction(m[k], v[k], p[k], c);
    w_sq += static_cast<double>(p[k]) * p[k];
    u_sq += static_cast<double>(u) * u;
  }
  return {w_sq, u_sq};
}

void lamb_apply(float* p, const float* m, const float* v, int64_t n, const LambStep& s, float step) {
  const LambStep c = s;
  for (int64_t k = 0; k < n; ++k) p[k] -= step * lamb_direction(m[k], v[k], p[k], c);
}

void lars_update(float* p, const float* g, float* v, int64_t n, float local_lr, float wd, float mu) {
  if (v == nullptr) {
    for (int64_t k = 0; k < n; ++k) lars_element(p[k], g[k], nullptr, local_lr, wd, mu);
    return;
  }
  for (int64_t k = 0; k < n; ++k) lars_element(p[k], g[k], v + k, local_lr, wd, mu);
}

namespace optimizer_threads {
constexpr int64_t kGrain = 32768;
float* data_or_null(Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
}  // namespace optimizer_threads

using optimizer_threads::data_or_null;
using optimizer_threads::kGrain;

void CpuKernels::sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& s) const {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* buf = data_or_null(momentum_buffer);
  parallel_for(0, param.numel(), kGrain, [=, &s](int64_t b, int64_t e) {
    cpu::sgd_update(p + b, g + b, buf ? buf + b : nullptr, e - b, s);
  });
}

void CpuKernels::adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                             const AdamStep& s) const {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  parallel_for(0, param.numel(), kGrain, [=, &s](int64_t b, int64_t e) {
    cpu::adam_update(p + b, g + b, m + b, v + b, e - b, s);
  });
}

// One pass in element order: the norms' sums are the same bits whatever the thread count.
std::pair<double, double> CpuKernels::lamb_moments(const Tensor& param, const Tensor& grad, Tensor& exp_avg,
                                                   Tensor& exp_avg_sq, const LambStep& s) const {
  return cpu::lamb_moments(param.data<float>(), grad.data<float>(), exp_avg.data<float>(), exp_avg_sq.data<float>(),
                           param.numel(), s);
}

void CpuKernels::lamb_apply(Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const LambStep& s,
                            float step) const {
  float* p = param.data<float>();
  const float* m = exp_avg.data<float>();
  const float* v = exp_avg_sq.data<float>();
  parallel_for(0, param.numel(), kGrain, [=, &s](int64_t b, int64_t e) {
    cpu::lamb_apply(p + b, m + b, v + b, e - b, s, step);
  });
}

void CpuKernels::lars_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, float local_lr,
                             float weight_decay, float momentum) const {
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* v = data_or_null(momentum_buffer);
  parallel_for(0, param.numel(), kGrain, [=](int64_t b, int64_t e) {
    cpu::lars_update(p + b, g + b, v ? v + b : nullptr, e - b, local_lr, weight_decay, momentum);
  });
}

}  // namespace tessera::cpu
