// Ranks as threads over the threaded backend, for the tests of tessera/parallel.
#pragma once
#include <memory>

#include "dist/collective_suite.h"
#include "tessera/dist/backends/threaded/threaded_communicator.h"

namespace tessera::testing {

inline CommunicatorFactory threaded(int world) {
  auto shared = dist::make_threaded_world(world);
  return [shared](const dist::BackendContext& c) { return dist::make_threaded_communicator(shared, c.rank); };
}

// A non-owning ProcessGroupPtr for the group run_on_threads lends each rank.
inline dist::ProcessGroupPtr borrow(dist::ProcessGroup& group) {
  return dist::ProcessGroupPtr(&group, [](dist::ProcessGroup*) {});
}

}  // namespace tessera::testing
