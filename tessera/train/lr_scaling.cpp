#include "tessera/train/lr_scaling.h"

#include <cmath>

#include "tessera/core/error.h"

namespace tessera::train {

double scaled_lr(double lr, const std::string& rule, int world_size) {
  TESSERA_CHECK(world_size >= 1, "[scaled_lr] world_size must be >= 1, got ", world_size);
  if (rule == "none") return lr;
  if (rule == "linear") return lr * world_size;
  if (rule == "sqrt") return lr * std::sqrt(static_cast<double>(world_size));
  throw ValueError("[scaled_lr] unknown rule '" + rule + "'; optimizer.scale_lr takes none, linear or sqrt");
}

}  // namespace tessera::train
