#include "tessera/optim/grad_scaler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  TESSERA_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0, "[grad_scaler] init_scale must be a "
                "positive number, got ", options.init_scale);
  TESSERA_CHECK(options.growth_factor > 1, "[grad_scaler] growth_factor must be above 1, got ", options.growth_factor);
  TESSERA_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1, "[grad_scaler] backoff_factor must be in "
                "(0, 1), got ", options.backoff_factor);
  TESSERA_CHECK(options.growth_interval >= 1, "[grad_scaler] growth_interval must be at least 1, got ",
                options.growth_interval);
}

void GradScaler::update(bool found_nonfinite) {
  if (found_nonfinite) {
    ++skipped_steps_;
    growth_tracker_ = 0;
    // Never down to 0: a scale that underflows would zero every gradient silently.
    scale_ = std::max(scale_ * options_.backoff_factor, 0x1p-24);
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  growth_tracker_ = 0;
  const double grown = scale_ * options_.growth_factor;
  if (std::isfinite(grown) && grown <= 0x1p100) scale_ = grown;  // far past any fp16 range: keep it finite
}

void GradScaler::restore(double scale, int64_t growth_tracker, int64_t skipped_steps) {
  TESSERA_CHECK(std::isfinite(scale) && scale > 0 && growth_tracker >= 0 && skipped_steps >= 0,
                "[grad_scaler] a saved state of scale ", scale, ", growth tracker ", growth_tracker, ", skipped ",
                skipped_steps, " is not one a scaler writes");
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  skipped_steps_ = skipped_steps;
}

bool unscale_tensors(const std::vector<Tensor>& grads, double inv_scale) {
  const float inv = static_cast<float>(inv_scale);
  bool nonfinite = false;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    TESSERA_CHECK(g.dtype() == DType::Float32 && g.is_contiguous(), "[grad_scaler] gradients must be contiguous "
                  "float32, got ", dtype_name(g.dtype()), " ", shape_str(g.shape()));
    if (!g.device().is_cpu()) {
      // On a device: the table's scale, then its sum of squares, which is inf or NaN exactly when an
      // element is (a float's square cannot overflow the double it is summed in).
      NoGradGuard no_grad;
      Tensor scaled = g;
      mul_(scaled, inv);
      nonfinite = nonfinite || !std::isfinite(squared_norm(g));
      continue;
    }
    float* d = g.data<float>();
    const int64_t n = g.numel();
    // inf · a finite factor stays inf and NaN stays NaN: one pass scales and checks. The check is on
    // the exponent bits (all ones: inf or NaN), an integer OR the compiler vectorises.
    uint32_t all_ones_exponent = 0;
    for (int64_t i = 0; i < n; ++i) {
      d[i] *= inv;
      all_ones_exponent |= (std::bit_cast<uint32_t>(d[i]) & 0x7f800000u) == 0x7f800000u;
    }
    nonfinite = nonfinite || all_ones_exponent != 0;
  }
  return nonfinite;
}

bool unscale_gradients(const std::vector<Tensor>& params, double inv_scale) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined() && !g.is_contiguous()) {
      g = g.contiguous();
      p.set_grad(g);
    }
    grads.push_back(g);
  }
  return unscale_tensors(grads, inv_scale);
}

}  // namespace tessera::optim
