#include "tessera/nn/expert_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/core/error.h"

namespace tessera::nn {

int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t top_k, double capacity_factor) {
  TESSERA_CHECK(tokens >= 0 && experts > 0 && top_k > 0 && capacity_factor > 0, "[moe] capacity needs tokens >= 0, "
                "experts > 0, top_k > 0 and capacity_factor > 0, got ", tokens, ", ", experts, ", ", top_k, ", ",
                capacity_factor);
  const double rows = std::ceil(capacity_factor * static_cast<double>(tokens * top_k) / static_cast<double>(experts));
  return std::max<int64_t>(1, static_cast<int64_t>(rows));
}

ExpertRouting route_tokens(const float* probs, int64_t tokens, int64_t experts, int64_t top_k, int64_t capacity) {
  TESSERA_CHECK(top_k >= 1 && top_k <= experts && capacity >= 1, "[moe] routing needs 1 <= top_k <= experts and "
                "capacity >= 1, got top_k ", top_k, " of ", experts, " experts, capacity ", capacity);
  ExpertRouting r;
  r.tokens = tokens, r.experts = experts, r.top_k = top_k, r.capacity = capacity;
  r.choice.resize(tokens * top_k);
  r.slot.assign(tokens * top_k, experts * capacity);
  r.slot_token.assign(experts * capacity, tokens);
  r.chosen.assign(experts, 0);
  std::vector<int64_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* p = probs + t * experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (int64_t k = 0; k < top_k; ++k) {
      r.choice[t * top_k + k] = order[k];
      ++r.chosen[order[k]];
    }
  }
  std::vector<int64_t> taken(experts, 0);
  for (int64_t k = 0; k < top_k; ++k)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t e = r.choice[t * top_k + k];
      if (taken[e] == capacity) {
        ++r.dropped;
        continue;
      }
      const int64_t row = e * capacity + taken[e]++;
      r.slot[t * top_k + k] = row;
      r.slot_token[row] = t;
    }
  return r;
}

}  // namespace tessera::nn
