// init_process_group: how a worker joins its job (torch.distributed.init_process_group):
//   - started by `tessera run`: RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and the store at
//     MASTER_ADDR:MASTER_PORT with TESSERA_JOB_TOKEN (launcher/env.h);
//   - started by mpirun, or by srun with an MPI plugin (PMI/PMIx): rank and size from MPI, rank 0
//     hosting the store (mpi_job.h);
//   - started by srun without one: rank, size and the master from the Slurm variables, rank 0
//     hosting the store (slurm_job.h);
//   - neither: a group of one over an in-process store, so single-process code runs unchanged.
#pragma once
#include <optional>
#include <string>

#include "tessera/dist/process_group.h"

namespace tessera::dist {

struct InitOptions {
  std::string backend = "auto";  // auto | gloo | shm | mpi
  Milliseconds timeout{300000};  // rendezvous, and every operation of the group
  std::optional<bool> debug;     // default: TESSERA_DIST_DEBUG=1
  bool wait_for_failure_reports = true;  // ProcessGroupOptions's
};

ProcessGroupPtr init_process_group(const InitOptions& options = {});

// True when this process is a rank of a job: started by `tessera run` (RANK and WORLD_SIZE set), by
// mpirun, or by srun as one task of several. Programs that also run alone (tessera train) ask this before joining.
bool launched_as_job();

}  // namespace tessera::dist
