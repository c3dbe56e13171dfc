// Backends by name. Each builds a Communicator for one rank of a group, rendezvousing through the
// group's private store; init_process_group (init.h) and ProcessGroup::new_group call these.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/dist/communicator.h"

namespace tessera::dist {

struct BackendContext {
  std::shared_ptr<Store> store;  // private to the group being created (a PrefixStore)
  int rank = 0;
  int size = 1;
  // How many of the group's ranks share this machine; size when all do (shm needs that; auto
  // uses it to choose). 0: unknown, the backend finds out through the store.
  int local_size = 0;
  Milliseconds timeout{300000};  // for the rendezvous itself
  // Where the tcp backend listens. Empty: loopback when the whole group is on this machine, else
  // the address this machine advertises (net/interface.h).
  std::string bind_host;
};

// Gloo's algorithms over its TCP transport (Debian's libgloo-dev). Any topology.
std::unique_ptr<Communicator> make_gloo_communicator(const BackendContext& context);
// Our own collectives over one TCP connection per pair of ranks (tcp/tcp_communicator.h, with the
// algorithms and their costs); point-to-point through Gloo. Any topology.
std::unique_ptr<Communicator> make_tcp_communicator(const BackendContext& context);
// Shared memory inside each host and tcp between the hosts' leaders for all-reduce, flat tcp for the
// rest (hierarchical_communicator.cpp, with the cost formulas). `host_id` tells this rank's host from
// the others (auto passes the address it advertises); every host with one rank gives flat tcp.
std::unique_ptr<Communicator> make_hierarchical_communicator(const BackendContext& context, const std::string& host_id);
// Our shared-memory backend: every rank of the group on this machine. ValueError otherwise.
std::unique_ptr<Communicator> make_shm_communicator(const BackendContext& context);
// Open MPI's MPI_COMM_WORLD (context.rank/size must match MPI's). NotSupportedError in a build
// without MPI, or in a process not started by mpirun/srun.
std::unique_ptr<Communicator> make_mpi_communicator(const BackendContext& context);
// The fastest available for each op and size (see auto_communicator.cpp for the measurements).
std::unique_ptr<Communicator> make_auto_communicator(const BackendContext& context);

// "gloo", "tcp", "shm", "mpi" or "auto"; ValueError naming the choices otherwise.
std::unique_ptr<Communicator> make_communicator(const std::string& backend, const BackendContext& context);
std::vector<std::string> backend_names();

}  // namespace tessera::dist
