// Joining a job that srun started, one process per task and no launcher of ours
// (`srun -N 2 -n 4 tessera train ...`): the Slurm variables become the env contract
// (launcher/slurm_env.h), and rank 0 hosts the rendezvous store that `tessera run` would have.
#pragma once
#include <optional>
#include <string>

#include "tessera/dist/launcher/slurm_env.h"
#include "tessera/dist/store/store.h"  // Milliseconds

namespace tessera::dist {

// The Slurm step of several tasks this process belongs to, when nothing else started it: not
// `tessera run` (RANK or TESSERA_ROLE set) and not mpirun (OMPI_COMM_WORLD_SIZE). srun's MPI plugins
// (PMIx, PMI-2) do not change that: the Slurm variables say it all, and only a job that asks for
// the mpi backend joins through MPI. ValueError when the step's variables are missing or disagree.
std::optional<launcher::SlurmStep> slurm_step_to_join();

// Where the store of a Slurm step's first node listens: the address the routes towards
// `master_addr` leave from, or TESSERA_SOCKET_IFNAME's. The first node's name may resolve, on that
// node, to loopback (Debian maps a machine's own name to 127.0.1.1) while the others resolve it to
// its real address: then the interface that reaches another node of the step.
std::string slurm_store_host(const launcher::SlurmStep& step, const std::string& master_addr);

// For such a step (once per process): sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// NODE_RANK, MASTER_ADDR, MASTER_PORT, TESSERA_JOB_TOKEN and TESSERA_NUM_THREADS in this process's
// environment, so the rest of tessera reads the step as a `tessera run` job (the threads: the
// launcher's own TESSERA_NUM_THREADS, else SLURM_CPUS_PER_TASK, else the task's CPU binding, else the
// node's cores over its tasks); on rank 0 starts the store (kept until the process exits, which waits
// up to TESSERA_SLURM_EXIT_WAIT_S for every task to leave it); every task's first connection waits
// up to `timeout` for it. It changes the environment: call it before the process starts threads that
// read it (init_process_group does, as the first thing a worker calls). Returns whether this process
// is such a task.
bool join_slurm_step(Milliseconds timeout);

}  // namespace tessera::dist
