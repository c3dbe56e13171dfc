#include "tessera/elastic/straggler_detector.h"

#include <algorithm>
#include <cstdio>

namespace tessera::elastic {

void StragglerDetector::reset() {
  seen_sequence_ = -1;
  strikes_.clear();
}

std::optional<StragglerReport> StragglerDetector::observe(const std::vector<std::map<int64_t, int64_t>>& arrivals) {
  const size_t world = arrivals.size();
  if (world < 2) return std::nullopt;
  std::vector<int> last_count(world, 0);
  std::vector<double> lag_ms(world, 0.0);
  int collectives = 0;
  int64_t first_seq = -1, last_seq = -1;
  for (const auto& [seq, t0] : arrivals[0]) {
    if (seq <= seen_sequence_) continue;
    std::vector<int64_t> t(world);
    bool everyone = true;
    for (size_t r = 0; r < world && everyone; ++r) {
      auto it = arrivals[r].find(seq);
      if (it == arrivals[r].end()) everyone = false;
      else t[r] = it->second;
    }
    if (!everyone) continue;
    const int64_t first = *std::min_element(t.begin(), t.end());
    ++last_count[static_cast<size_t>(std::max_element(t.begin(), t.end()) - t.begin())];
    for (size_t r = 0; r < world; ++r) lag_ms[r] += static_cast<double>(t[r] - first) / 1e3;
    ++collectives;
    if (first_seq < 0) first_seq = seq;
    last_seq = std::max(last_seq, seq);
  }
  if (collectives == 0) return std::nullopt;
  seen_sequence_ = last_seq;
  std::vector<double> sorted = lag_ms;
  std::sort(sorted.rbegin(), sorted.rend());
  const int late = static_cast<int>(std::max_element(lag_ms.begin(), lag_ms.end()) - lag_ms.begin());
  for (int r = 0; r < static_cast<int>(world); ++r)
    if (r != late) strikes_[r] = 0;
  const double window_ms = static_cast<double>(window_.count());
  if (!(sorted[0] > 3 * sorted[1] && sorted[0] > 0.05 * window_ms)) {
    strikes_[late] = 0;
    return std::nullopt;
  }
  if (++strikes_[late] != 3) return std::nullopt;  // named once per streak
  char text[512];
  std::snprintf(text, sizeof text,
                "straggler: rank %d is consistently late at the collectives: over #%lld..#%lld (%d that every rank "
                "reached) it arrived last at %d and kept the others waiting %.1f ms in all (the next latest rank: "
                "%.1f ms); the 3rd window of %.2f s in a row",
                late, static_cast<long long>(first_seq), static_cast<long long>(last_seq), collectives,
                last_count[static_cast<size_t>(late)], sorted[0], sorted[1], window_ms / 1e3);
  return StragglerReport{late, text};
}

}  // namespace tessera::elastic
