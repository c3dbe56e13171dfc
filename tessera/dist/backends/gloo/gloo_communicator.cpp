// Placeholder until the gloo backend lands.
#include "tessera/core/error.h"
#include "tessera/dist/backends/backend.h"

namespace tessera::dist {
std::unique_ptr<Communicator> make_gloo_communicator(const BackendContext&) {
  throw NotSupportedError("[init_process_group] backend gloo is not built yet");
}
}  // namespace tessera::dist
