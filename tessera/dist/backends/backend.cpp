#include "tessera/dist/backends/backend.h"

#include "tessera/core/error.h"

namespace tessera::dist {

std::vector<std::string> backend_names() { return {"auto", "gloo", "tcp", "shm", "mpi"}; }

std::unique_ptr<Communicator> make_communicator(const std::string& backend, const BackendContext& context) {
  TESSERA_CHECK(context.store != nullptr, "[init_process_group] backend ", backend, " needs a store");
  TESSERA_CHECK(context.size >= 1 && context.rank >= 0 && context.rank < context.size,
                "[init_process_group] rank ", context.rank, " is not in a world of ", context.size);
  if (backend == "gloo") return make_gloo_communicator(context);
  if (backend == "tcp") return make_tcp_communicator(context);
  if (backend == "shm") return make_shm_communicator(context);
  if (backend == "mpi") return make_mpi_communicator(context);
  if (backend == "auto") return make_auto_communicator(context);
  throw ValueError(tessera::detail::concat("[init_process_group] unknown backend '", backend,
                                           "'; choose one of auto, gloo, tcp, shm, mpi"));
}

}  // namespace tessera::dist
