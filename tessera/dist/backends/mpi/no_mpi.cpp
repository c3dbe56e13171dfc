// The mpi backend in a build without Open MPI (CMake did not find it): says how to get it.
#include "tessera/core/error.h"
#include "tessera/dist/backends/backend.h"

namespace tessera::dist {
std::unique_ptr<Communicator> make_mpi_communicator(const BackendContext&) {
  throw NotSupportedError(
      "[init_process_group] this tessera was built without MPI: apt-get install libopenmpi-dev openmpi-bin, "
      "then rebuild (or use backend gloo or shm)");
}
}  // namespace tessera::dist

#include <cstdlib>

#include "tessera/dist/backends/mpi/mpi_job.h"

namespace tessera::dist {
bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}
MpiJob join_mpi_job(Milliseconds) {
  throw NotSupportedError(
      "[init_process_group] started by an MPI launcher, but this tessera was built without MPI: "
      "apt-get install libopenmpi-dev openmpi-bin and rebuild, or start the job with `tessera run`");
}
}  // namespace tessera::dist
