// Joining a job that srun started, one process per task and no launcher of ours
// (`srun -N 2 -n 4 tessera train ...`): the Slurm variables become the env contract
// (launcher/slurm_env.h), and rank 0 hosts the rendezvous store that `tessera run` would have.
#pragma once
#include <optional>
#include <string>

#include "tessera/dist/launcher/slurm_env.h"

namespace tessera::dist {

// The Slurm step of several tasks this process belongs to, when nothing else started it: not
// `tessera run` (RANK and WORLD_SIZE set) and not an MPI launcher (launched_by_mpi). ValueError
// when the step's variables are missing or disagree.
std::optional<launcher::SlurmStep> slurm_step_to_join();

// Where the store of a Slurm step's first node listens: the address the routes towards
// `master_addr` leave from, or TESSERA_SOCKET_IFNAME's. The first node's name may resolve, on that
// node, to loopback (Debian maps a machine's own name to 127.0.1.1) while the others resolve it to
// its real address: then the interface that reaches another node of the step.
std::string slurm_store_host(const launcher::SlurmStep& step, const std::string& master_addr);

// For such a step (once per process): sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// NODE_RANK, MASTER_ADDR, MASTER_PORT and TESSERA_JOB_TOKEN in this process's environment, so the
// rest of tessera reads the step as a `tessera run` job; on rank 0 starts the store (kept until the
// process exits, which waits up to TESSERA_SLURM_EXIT_WAIT_S for every task to leave it); sets the
// intra-op threads to cores / tasks on this node unless TESSERA_NUM_THREADS is set. Call it before
// the process starts threads of its own (it changes the environment). Returns whether this process
// is such a task.
bool join_slurm_step();

}  // namespace tessera::dist
