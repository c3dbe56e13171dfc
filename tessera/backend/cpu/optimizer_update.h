// The fused optimizer updates on the CPU, over plain arrays (each element's formula is
// ops/optimizer_formulas.h's, the CUDA kernels' too). The CPU kernel table (cpu_optimizer.cpp) runs them over
// whole parameters, split across the intra-op threads; a parameter server runs them over the rows
// of an embedding that a push touched (parallel/ps/shard_optimizer.cpp).
#pragma once
#include <cstdint>
#include <utility>

#include "tessera/ops/kernels.h"

namespace tessera::cpu {

// p, g, buf: n floats; buf is null without momentum.
void sgd_update(float* p, const float* g, float* buf, int64_t n, const SgdStep& s);
void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamStep& s);
// Updates the moments; returns ||w||² and ||u||² (in double: millions of squares).
std::pair<double, double> lamb_moments(const float* p, const float* g, float* m, float* v, int64_t n,
                                       const LambStep& s);
void lamb_apply(float* p, const float* m, const float* v, int64_t n, const LambStep& s, float step);
// v is null without momentum.
void lars_update(float* p, const float* g, float* v, int64_t n, float local_lr, float weight_decay, float momentum);

}  // namespace tessera::cpu
