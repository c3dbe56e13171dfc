// Learning-rate scaling with the number of data-parallel ranks. With N ranks each taking the
// configured batch, the global batch is N times larger; the linear rule (Goyal et al. 2017,
// "Accurate, Large Minibatch SGD") multiplies lr by N, the square-root rule (Krizhevsky 2014; Hoffer
// et al. 2017) by sqrt(N), which suits adaptive optimizers better.
#pragma once
#include <string>

namespace tessera::train {

// rule: "none" | "linear" | "sqrt" (optimizer.scale_lr); world_size >= 1.
double scaled_lr(double lr, const std::string& rule, int world_size);

}  // namespace tessera::train
