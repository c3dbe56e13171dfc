// Placeholder until the shm backend lands.
#include "tessera/core/error.h"
#include "tessera/dist/backends/backend.h"

namespace tessera::dist {
std::unique_ptr<Communicator> make_shm_communicator(const BackendContext&) {
  throw NotSupportedError("[init_process_group] backend shm is not built yet");
}
}  // namespace tessera::dist
