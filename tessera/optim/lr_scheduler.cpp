#include "tessera/optim/lr_scheduler.h"

#include <cmath>

namespace tessera::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() { set_position(position_ + 1); }

void LRScheduler::set_position(int64_t position) {
  TESSERA_CHECK(position >= 0, "[LRScheduler] position must be >= 0, got ", position);
  position_ = position;
  optimizer_.set_lr(base_lr_ * factor(position_));
}

StepLR::StepLR(Optimizer& opt, int64_t s, double g) : LRScheduler(opt), step_size(s), gamma(g) {
  TESSERA_CHECK(s > 0, "[StepLR] step_size must be positive, got ", s);
}

double StepLR::factor(int64_t step) const { return std::pow(gamma, static_cast<double>(step / step_size)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t total, double eta)
    : LRScheduler(opt), total_steps(total), eta_min(eta) {
  TESSERA_CHECK(total > 0, "[CosineAnnealingLR] total_steps must be positive, got ", total);
}

double CosineAnnealingLR::factor(int64_t step) const {
  double t = std::min<double>(static_cast<double>(step), static_cast<double>(total_steps)) / total_steps;
  double min_factor = base_lr() > 0 ? eta_min / base_lr() : 0.0;
  return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + std::cos(M_PI * t));
}

LinearWarmupLR::LinearWarmupLR(Optimizer& opt, int64_t w, double s, std::shared_ptr<LRScheduler> a)
    : LRScheduler(opt), warmup_steps(w), start_factor(s), after(std::move(a)) {
  TESSERA_CHECK(w >= 0 && s >= 0 && s <= 1, "[LinearWarmupLR] needs warmup_steps >= 0 and start_factor in [0, 1]");
}

double LinearWarmupLR::factor(int64_t step) const {
  if (step < warmup_steps) return start_factor + (1.0 - start_factor) * static_cast<double>(step) / warmup_steps;
  return after ? after->factor(step - warmup_steps) : 1.0;
}

}  // namespace tessera::optim
