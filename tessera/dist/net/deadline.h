// Deadlines for the store's blocking calls. A timeout becomes a steady_clock deadline once, at the
// start of an operation, so that retries and partial reads share one budget instead of each
// restarting the clock.
#pragma once
#include <algorithm>
#include <chrono>
#include <climits>

#include "tessera/dist/bytes.h"

namespace tessera::dist::detail {

using Clock = std::chrono::steady_clock;

// Timeouts are clamped to [0, a year]: `now() + Milliseconds::max()` would overflow, and "wait
// forever" is spelled as a very long timeout everywhere in tessera.
inline Milliseconds clamp_timeout(Milliseconds timeout) {
  constexpr Milliseconds kLongest = std::chrono::hours(24 * 365);
  return std::clamp(timeout, Milliseconds(0), kLongest);
}

inline Clock::time_point deadline_after(Milliseconds timeout) { return Clock::now() + clamp_timeout(timeout); }

// Milliseconds left until `deadline`, for poll(); rounded up so that a sub-millisecond remainder
// does not turn into a busy loop of poll(..., 0).
inline int poll_timeout_ms(Clock::time_point deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<Milliseconds>(left).count();
  return static_cast<int>(std::min<long long>(ms, INT_MAX));
}

}  // namespace tessera::dist::detail
