// The process-wide MPI state the mpi backend shares: MPI_Init_thread once, MPI_Finalize at exit,
// the lock that serialises MPI calls when the library is not thread-safe, and the one wait loop
// through which every nonblocking request completes (MPI has no timed wait, so the deadline is
// ours to check).
#pragma once
#include <mpi.h>

#include <memory>
#include <mutex>
#include <string>

#include "tessera/dist/types.h"

namespace tessera::dist::detail {

// MPI_Init_thread asking for MPI_THREAD_MULTIPLE (ProcessGroup runs collectives on its worker
// thread while p2p is posted and waited on from others), once per process, with MPI_Finalize
// registered to run at exit. Adopts an MPI the program initialised itself (and then leaves its
// finalisation to the program). Error if MPI was already finalised.
void ensure_mpi_initialised();

// Whether the MPI library gave less than MPI_THREAD_MULTIPLE, so that MpiLock serialises calls.
bool mpi_calls_serialised();

// Held around every MPI call: the process-wide MPI mutex when mpi_calls_serialised(), nothing
// otherwise (an uncontended no-op with MPI_THREAD_MULTIPLE).
class MpiLock {
 public:
  MpiLock();

 private:
  std::unique_lock<std::mutex> lock_;
};

// After an operation timed out its request is still pending and the peers may never come, while
// Open MPI's MPI_Finalize waits for them (a PMIx fence): at exit such a process calls MPI_Abort
// instead, so that mpirun ends the whole job at once. Exiting without either left mpirun to notice
// an "improper" exit by itself, which it sometimes did only after minutes (a suite run: every rank
// had finished, and mpirun was still there when the test's 120 s timeout killed it).
void mark_mpi_unfinishable();

// Kept alive until MPI_Finalize has run at exit (rank 0's rendezvous store server: the other ranks
// reach the finalize fence only after their last store call, so the server outlives them).
void keep_until_mpi_finalize(std::shared_ptr<void> object);

// "MPI_ERR_TRUNCATE: message truncated" for an MPI error code.
std::string mpi_error_text(int code);

struct RequestOutcome {
  bool complete = false;
  int error = MPI_SUCCESS;  // the code of a failed MPI_Test; complete is then true
};

// Tests `request` until it completes or `deadline` passes. Spins first (small collectives finish
// in microseconds), then yields, then sleeps briefly: with more ranks than cores a spinning waiter
// steals the core its peer needs, and Open MPI progresses nonblocking collectives only inside
// MPI calls, so the sleeps stay short (at most kMaxPollSleep).
RequestOutcome wait_for_request(MPI_Request& request, Deadline deadline, MPI_Status* status = MPI_STATUS_IGNORE);

// Milliseconds since `start`, for "not complete after T ms".
long long elapsed_ms(Clock::time_point start);

}  // namespace tessera::dist::detail
