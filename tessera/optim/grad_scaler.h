// Dynamic loss scaling for fp16 mixed precision (PyTorch's torch.cuda.amp.GradScaler, DeepSpeed's
// fp16 "dynamic_loss_scale"). fp16 keeps values from 2^-24 to 65504: the backward's small gradients
// would flush to zero. So the loss is multiplied by `scale` before backward, which lifts every
// gradient by the same factor; before the optimizer step the gradients are multiplied by 1/scale
// again, and checked:
//   - any inf or NaN (the scale pushed a value past fp16's range): the step is skipped (parameters
//     and optimizer state unchanged) and the scale is multiplied by backoff_factor;
//   - otherwise the step is taken, and after growth_interval steps in a row without one the scale is
//     multiplied by growth_factor, to find again the largest scale that does not overflow.
// With several ranks, every rank must agree on skipping (Strategy::unscale_gradients agrees).
//
// The loop, as the trainer runs it (train/trainer.cpp):
//   loss = forward(batch);  backward(loss * scaler.scale());
//   bool overflow = any rank's unscale_gradients(grads, 1 / scaler.scale());
//   if (!overflow) optimizer.step();
//   scaler.update(overflow);
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, PyTorch's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  double scale() const { return scale_; }
  // After a step's gradients were checked: backs off on an overflow, grows after growth_interval
  // good steps in a row.
  void update(bool found_nonfinite);

  int64_t skipped_steps() const { return skipped_steps_; }
  // Good steps since the last change of the scale (what a resumed run needs with the scale).
  int64_t growth_tracker() const { return growth_tracker_; }
  // A resumed run's state.
  void restore(double scale, int64_t growth_tracker, int64_t skipped_steps);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0, skipped_steps_ = 0;
};

// Multiplies each defined gradient of `params` by inv_scale in place; true if any gradient holds an
// inf or NaN (checked on the unscaled values). This process's gradients only.
bool unscale_gradients(const std::vector<Tensor>& params, double inv_scale);
// The same over gradient tensors themselves (ZeRO's pieces).
bool unscale_tensors(const std::vector<Tensor>& grads, double inv_scale);

}  // namespace tessera::optim
