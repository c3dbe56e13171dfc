// Helpers of the DDP tests: ranks as threads (threaded_group.h) and the largest parameter difference
// between two models.
#pragma once
#include <cmath>

#include "parallel/threaded_group.h"
#include "tessera/nn/module.h"

namespace tessera::testing {

inline double max_parameter_difference(const nn::Module& a, const nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    auto x = pa[i].second.to_vector<float>(), y = pb[i].second.to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::fabs(double(x[k]) - y[k]));
  }
  return worst;
}

}  // namespace tessera::testing
