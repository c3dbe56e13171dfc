// join_mpi_job: rank 0 starts the rendezvous store and tells the others where it is, over MPI.
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/dist/backends/mpi/mpi_job.h"
#include "tessera/dist/backends/mpi/mpi_runtime.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/job_token.h"
#include "tessera/dist/slurm_job.h"
#include "tessera/dist/store/tcp_store.h"
#include "tessera/dist/store/tcp_store_server.h"

namespace tessera::dist {

namespace {

using detail::Clock;
using detail::MpiLock;
using tessera::detail::concat;

// What rank 0 broadcasts: "<host> <port> <token>", or kFailed and why it could not start the store
// (so that the other ranks fail with its reason instead of waiting for a store that never comes).
constexpr char kFailed = '!';

// Completes a request on MPI_COMM_WORLD by `deadline`, or fails naming what the ranks were doing.
void complete(MPI_Request& request, Deadline deadline, int rank, Clock::time_point start, const char* what) {
  detail::RequestOutcome outcome = detail::wait_for_request(request, deadline);
  if (outcome.complete && outcome.error == MPI_SUCCESS) return;
  if (outcome.complete) {
    throw PeerFailureError(concat("[init_process_group] backend mpi: rank ", rank, ": ", what, " failed: ",
                                  detail::mpi_error_text(outcome.error)));
  }
  detail::mark_mpi_unfinishable();
  throw TimeoutError(concat("[init_process_group] rank ", rank, ": ", what, " not complete after ",
                            detail::elapsed_ms(start), " ms (did every rank of the mpirun job call init_process_group?)"));
}

// Rank 0's `text` on every rank.
std::string broadcast_text(std::string text, int rank, Deadline deadline, Clock::time_point start) {
  // Posted and completed one at a time; MPI_COMM_WORLD keeps its default handler (errors abort).
  long long length = static_cast<long long>(text.size());
  MPI_Request request = MPI_REQUEST_NULL;
  {
    MpiLock lock;
    MPI_Ibcast(&length, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD, &request);
  }
  complete(request, deadline, rank, start, "receiving the store's address from rank 0");
  text.resize(static_cast<size_t>(length));
  {
    MpiLock lock;
    MPI_Ibcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD, &request);
  }
  complete(request, deadline, rank, start, "receiving the store's address from rank 0");
  return text;
}

// How many ranks share this machine (MPI_COMM_TYPE_SHARED: one shared-memory node).
int count_local_ranks(int rank, Deadline deadline, Clock::time_point start) {
  // MPI_Comm_split_type blocks until every rank calls it; a barrier first bounds that wait.
  MPI_Request request = MPI_REQUEST_NULL;
  {
    MpiLock lock;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
  }
  complete(request, deadline, rank, start, "waiting for every rank in MPI_Ibarrier");
  MpiLock lock;
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_size = 1;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  return local_size;
}

// Rank 0: starts the store server, kept until MPI_Finalize, and returns "<host> <port> <token>".
std::string start_store_server(bool one_machine, int size) {
  std::string host = "127.0.0.1";  // loopback only when it can: nothing else can reach the store
  if (!one_machine) {
    if (auto master = launcher::master_addr_from_environment()) {
      host = *master;
    } else if (auto step = launcher::slurm_step_from_environment()) {
      // srun with an MPI plugin: rank 0 runs on the step's first node; the others learn the address
      // over MPI, so no name needs to resolve anywhere.
      host = slurm_store_host(*step, step->nodes.front());
    } else {
      throw ValueError(concat("[init_process_group] rank 0: the ", size,
                              " ranks of this mpirun job are on several machines, so the rendezvous store must "
                              "listen on an address the others can reach: set MASTER_ADDR to this machine's "
                              "address (e.g. mpirun -x MASTER_ADDR=node0 ...)"));
    }
  }
  TcpStoreServerOptions options;
  options.host = host;
  if (auto port = launcher::master_port_from_environment(); port && !one_machine) options.port = static_cast<uint16_t>(*port);
  options.token = launcher::random_job_token();
  auto server = std::make_shared<TcpStoreServer>(options);
  detail::keep_until_mpi_finalize(server);
  return concat(host, " ", server->port(), " ", options.token);
}

MpiJob join(Milliseconds timeout) {
  const Clock::time_point start = Clock::now();
  const Deadline deadline = detail::deadline_after(timeout);
  detail::ensure_mpi_initialised();
  MpiJob job;
  {
    MpiLock lock;
    MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &job.size);
  }
  job.local_size = count_local_ranks(job.rank, deadline, start);
  std::string address;
  std::exception_ptr failure;
  if (job.rank == 0) {
    try {
      address = start_store_server(job.local_size == job.size, job.size);
    } catch (const std::exception& e) {
      failure = std::current_exception();
      address = std::string(1, kFailed) + e.what();
    }
  }
  address = broadcast_text(address, job.rank, deadline, start);
  if (failure) std::rethrow_exception(failure);
  if (!address.empty() && address[0] == kFailed) {
    throw Error(concat("[init_process_group] rank ", job.rank,
                       ": rank 0 could not start the rendezvous store: ", address.substr(1)));
  }
  TcpStoreOptions options;
  std::istringstream fields(address);
  fields >> options.host >> options.port >> options.token;
  options.rank = job.rank;
  options.timeout = timeout;
  options.connect_timeout = timeout;
  job.store = std::make_shared<TcpStore>(options);
  return job;
}

}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

MpiJob join_mpi_job(Milliseconds timeout) {
  // Once per process: a second init_process_group reuses the job (and its store) rather than
  // starting another server; its groups stay apart through their store prefixes.
  static std::mutex mu;
  static std::optional<MpiJob> joined;
  std::lock_guard lock(mu);
  if (!joined) joined = join(timeout);
  return *joined;
}

}  // namespace tessera::dist
