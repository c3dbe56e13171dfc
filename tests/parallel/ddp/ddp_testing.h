// Helpers of the DDP tests: ranks as threads over the threaded backend, random batches, and the
// largest parameter difference between two models.
#pragma once
#include <cmath>
#include <functional>
#include <memory>

#include "dist/collective_suite.h"
#include "tessera/core/rng.h"
#include "tessera/dist/backends/threaded/threaded_communicator.h"
#include "tessera/nn/module.h"
#include "tessera/ops/ops.h"

namespace tessera::testing {

inline CommunicatorFactory threaded(int world) {
  auto shared = dist::make_threaded_world(world);
  return [shared](const dist::BackendContext& c) { return dist::make_threaded_communicator(shared, c.rank); };
}

// A process group handle for code that wants a ProcessGroupPtr (run_on_threads owns the group).
inline dist::ProcessGroupPtr borrow(dist::ProcessGroup& group) {
  return std::shared_ptr<dist::ProcessGroup>(&group, [](dist::ProcessGroup*) {});
}

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
