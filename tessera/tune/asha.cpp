#include "tessera/tune/asha.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::tune {

Asha::Asha(AshaOptions o) : options_(o) {
  TESSERA_CHECK(o.min_epochs >= 1 && o.max_epochs >= o.min_epochs && o.eta >= 2,
                "[tune] ASHA needs 1 <= min_epochs <= max_epochs and eta >= 2, got ", o.min_epochs, ", ", o.max_epochs,
                ", ", o.eta);
  for (int64_t r = o.min_epochs; r < o.max_epochs; r *= o.eta) rungs_.push_back(r);
  rungs_.push_back(o.max_epochs);
  results_.resize(rungs_.size());
  promoted_.resize(rungs_.size());
}

void Asha::report(int64_t trial, int rung, double metric) {
  TESSERA_CHECK(rung >= 0 && rung < static_cast<int>(rungs_.size()), "[tune] rung ", rung, " of ", rungs_.size());
  results_[static_cast<size_t>(rung)].emplace_back(trial, metric);
}

std::optional<std::pair<int64_t, int>> Asha::promote() {
  for (int k = static_cast<int>(rungs_.size()) - 2; k >= 0; --k) {
    std::vector<std::pair<int64_t, double>> done;
    for (const auto& r : results_[static_cast<size_t>(k)])
      if (!std::isnan(r.second)) done.push_back(r);
    // Failed trials count in the cohort (they took a place) but are never promoted.
    const size_t keep = results_[static_cast<size_t>(k)].size() / static_cast<size_t>(options_.eta);
    std::sort(done.begin(), done.end(), [&](const auto& a, const auto& b) {
      return better(a.second, b.second) || (a.second == b.second && a.first < b.first);
    });
    for (size_t i = 0; i < std::min(keep, done.size()); ++i)
      if (promoted_[static_cast<size_t>(k)].insert(done[i].first).second) return std::make_pair(done[i].first, k + 1);
  }
  return std::nullopt;
}

std::optional<Asha::Best> Asha::best() const {
  for (int k = static_cast<int>(rungs_.size()) - 1; k >= 0; --k) {
    std::optional<Best> b;
    for (const auto& [trial, metric] : results_[static_cast<size_t>(k)])
      if (!std::isnan(metric) && (!b || better(metric, b->metric))) b = Best{trial, k, metric};
    if (b) return b;
  }
  return std::nullopt;
}

}  // namespace tessera::tune
