// Learning-rate schedules. Call step() once per optimizer step (or per epoch, as you choose); the
// scheduler sets optimizer.lr = base_lr * factor(steps taken). Its position is one integer, saved in
// checkpoints so a resumed run continues the same curve.
#pragma once
#include <memory>

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  virtual double factor(int64_t step) const = 0;
  void step();
  int64_t position() const { return position_; }
  void set_position(int64_t position);  // also applies the lr
  double base_lr() const { return base_lr_; }

 private:
  Optimizer& optimizer_;
  double base_lr_;
  int64_t position_ = 0;
};

// lr * gamma^(floor(step / step_size)).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double factor(int64_t step) const override;
  int64_t step_size;
  double gamma;
};

// Cosine from lr down to eta_min over total_steps, then held at eta_min.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t total_steps, double eta_min = 0.0);
  double factor(int64_t step) const override;
  int64_t total_steps;
  double eta_min;
};

// Linear warm-up from start_factor to 1 over warmup_steps, then the `after` schedule (shifted to
// start at 0) or a constant.
class LinearWarmupLR : public LRScheduler {
 public:
  LinearWarmupLR(Optimizer& opt, int64_t warmup_steps, double start_factor = 0.0,
                 std::shared_ptr<LRScheduler> after = nullptr);
  double factor(int64_t step) const override;
  int64_t warmup_steps;
  double start_factor;
  std::shared_ptr<LRScheduler> after;
};

}  // namespace tessera::optim
