// The threaded backend: ranks are threads of one process sharing a ThreadedWorld. No transport,
// no copies beyond the result: tier 1 of the distributed tests (strategy unit tests at world sizes
// 1–8 in one process, fast and deterministic). Every wait is bounded by the deadline and names the
// ranks that have not arrived, like the real backends.
#pragma once
#include <memory>

#include "tessera/dist/communicator.h"

namespace tessera::dist {

class ThreadedWorld;

// A world of `size` ranks; give the same world to one communicator per rank, each on its own thread.
std::shared_ptr<ThreadedWorld> make_threaded_world(int size);
std::unique_ptr<Communicator> make_threaded_communicator(std::shared_ptr<ThreadedWorld> world, int rank);

}  // namespace tessera::dist
