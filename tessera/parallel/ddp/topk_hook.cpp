#include "tessera/parallel/ddp/topk_hook.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::ddp {

namespace {

// |x| with NaN ordered above everything, so a NaN gradient is sent (and seen) rather than breaking
// the ordering nth_element needs.
float magnitude(float x) { return std::isnan(x) ? std::numeric_limits<float>::infinity() : std::fabs(x); }

}  // namespace

TopKHook::TopKHook(double ratio) : ratio_(ratio) {
  TESSERA_CHECK(ratio > 0.0 && ratio <= 1.0, "[topk] ratio must be in (0, 1], got ", ratio);
}

int64_t TopKHook::k_for(int64_t numel) const {
  if (numel == 0) return 0;
  // The slack keeps products like 0.01 · 300 = 3.0000000000000004 from rounding up to 4.
  auto k = static_cast<int64_t>(std::ceil(ratio_ * static_cast<double>(numel) - 1e-9));
  return std::clamp<int64_t>(k, 1, numel);
}

void TopKHook::start(dist::ProcessGroup& group, const BucketView& bucket) {
  int64_t n = bucket.flat.numel(), k = k_for(n);
  TESSERA_CHECK(n <= std::numeric_limits<int32_t>::max(), "[topk] bucket ", bucket.index, " has ", n,
                " elements; indices travel as int32, so lower DdpOptions::bucket_cap_bytes");
  BucketState& s = buckets_[bucket.index];
  if (s.shapes != bucket.shapes || s.offsets != bucket.offsets) {  // new, or rebuilt by the reducer
    s.shapes = bucket.shapes;
    s.offsets = bucket.offsets;
    s.error = zeros({n});
  }
  // v = grad + error, kept in `error` (the sent entries are zeroed below).
  float* v = s.error.data<float>();
  const float* grad = bucket.flat.data<float>();
  for (int64_t i = 0; i < n; ++i) v[i] += grad[i];

  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto larger = [v](int32_t a, int32_t b) {
    float ma = magnitude(v[a]), mb = magnitude(v[b]);
    return ma > mb || (ma == mb && a < b);
  };
  std::nth_element(order.begin(), order.begin() + k, order.end(), larger);

  Tensor pairs = Tensor::empty({2 * k});  // (k, 2): index bits, value
  float* out = pairs.data<float>();
  for (int64_t j = 0; j < k; ++j) {
    int32_t i = order[static_cast<size_t>(j)];
    out[2 * j] = std::bit_cast<float>(i);
    out[2 * j + 1] = v[i];
    v[i] = 0.0f;
  }
  s.gathered = Tensor::empty({group.size() * 2 * k});
  s.work = group.allgather(pairs, s.gathered);
  bytes_ += 2 * k * 4;
}

void TopKHook::finish(dist::ProcessGroup& group, const BucketView& bucket) {
  auto it = buckets_.find(bucket.index);
  TESSERA_ASSERT(it != buckets_.end() && it->second.work, "bucket ", bucket.index, " finished without being started");
  BucketState& s = it->second;
  std::exchange(s.work, nullptr)->wait();
  Tensor flat = bucket.flat;
  fill_(flat, 0.0f);
  float* out = flat.data<float>();
  const float* pairs = s.gathered.data<float>();
  int64_t n = flat.numel(), count = s.gathered.numel() / 2;
  for (int64_t j = 0; j < count; ++j) {
    int32_t i = std::bit_cast<int32_t>(pairs[2 * j]);
    TESSERA_ASSERT(i >= 0 && i < n, "topk index ", i, " outside bucket ", bucket.index, " of ", n);
    out[i] += pairs[2 * j + 1];
  }
  dist::divide_in_place(dist::Buffer{out, n, DType::Float32}, bucket.divisor);
  s.gathered = Tensor();
}

}  // namespace tessera::parallel::ddp
