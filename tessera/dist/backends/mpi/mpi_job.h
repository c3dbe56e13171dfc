// Joining a job started by mpirun or srun (`mpirun -np 4 tessera ...`): rank and size come from
// MPI, and rank 0 hosts the rendezvous store that the other backends and the failure reports use,
// its address and a fresh job token shared with MPI_Bcast.
#pragma once
#include <memory>

#include "tessera/dist/store/store.h"

namespace tessera::dist {

// Whether the environment says an MPI launcher started this process (Open MPI's
// OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, or Slurm's PMI_SIZE), before any MPI call.
bool launched_by_mpi();

struct MpiJob {
  int rank = 0;
  int size = 1;
  int local_size = 1;  // ranks on this machine
  std::shared_ptr<Store> store;
};

// Initialises MPI (once per process) and rendezvouses; NotSupportedError in a build without MPI.
MpiJob join_mpi_job(Milliseconds timeout);

}  // namespace tessera::dist
