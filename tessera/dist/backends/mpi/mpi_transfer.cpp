#include "tessera/dist/backends/mpi/mpi_transfer.h"

#include <climits>

#include "tessera/core/error.h"
#include "tessera/dist/backends/mpi/mpi_runtime.h"
#include "tessera/dist/backends/mpi/mpi_types.h"

namespace tessera::dist::detail {

using tessera::detail::concat;

namespace {
// How long a cancelled recv may take to report its cancellation. Open MPI cancels an unmatched
// receive locally, at once; a matched one completes instead, as soon as its data is in.
constexpr Milliseconds kCancelWait{1000};
}  // namespace

MpiTransfer::MpiTransfer(Kind kind, int rank, int peer, int tag) : kind_(kind), rank_(rank), peer_(peer), tag_(tag) {}

std::unique_ptr<MpiTransfer> MpiTransfer::post(Kind kind, Buffer data, int peer, int tag, MPI_Comm comm, int rank) {
  std::unique_ptr<MpiTransfer> transfer(new MpiTransfer(kind, rank, peer, tag));
  if (data.count > INT_MAX) {
    throw NotSupportedError(concat("[mpi ", transfer->op(), "] rank ", rank, ": ", transfer->route(), ": ",
                                   data.count, " elements exceed MPI's int count; send it in parts"));
  }
  int count = static_cast<int>(data.count);
  int code;
  {
    MpiLock lock;
    code = kind == Kind::Send
               ? MPI_Isend(data.data, count, mpi_datatype(data.dtype), peer, tag, comm, &transfer->request_)
               : MPI_Irecv(data.data, count, mpi_datatype(data.dtype), peer, tag, comm, &transfer->request_);
  }
  if (code != MPI_SUCCESS) {
    throw Error(concat("[mpi ", transfer->op(), "] rank ", rank, ": ", transfer->route(), ": ", mpi_error_text(code)));
  }
  return transfer;
}

MpiTransfer::~MpiTransfer() {
  if (request_ == MPI_REQUEST_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) abandon();
}

std::string MpiTransfer::route() const {
  return concat(kind_ == Kind::Send ? "to rank " : "from rank ", peer_, " (tag ", tag_, ")");
}

void MpiTransfer::wait(Deadline deadline) {
  if (request_ == MPI_REQUEST_NULL) return;
  const Clock::time_point start = Clock::now();
  MPI_Status status;
  RequestOutcome outcome = wait_for_request(request_, deadline, &status);
  if (outcome.complete && outcome.error == MPI_SUCCESS) {
    request_ = MPI_REQUEST_NULL;
    return;
  }
  if (outcome.complete) {
    request_ = MPI_REQUEST_NULL;
    throw PeerFailureError(concat("[mpi ", op(), "] rank ", rank_, ": ", route(), " failed: ",
                                  mpi_error_text(outcome.error)));
  }
  abandon();
  throw TimeoutError(concat("[mpi ", op(), "] rank ", rank_, ": ", route(), " not complete after ", elapsed_ms(start),
                            " ms"));
}

void MpiTransfer::abandon() {
  if (kind_ == Kind::Recv) {
    {
      MpiLock lock;
      MPI_Cancel(&request_);
    }
    // Complete either way (cancelled, or the message arrived meanwhile): the buffer is free again.
    if (wait_for_request(request_, detail::deadline_after(kCancelWait)).complete) {
      request_ = MPI_REQUEST_NULL;
      return;
    }
  }
  // A send cannot be cancelled reliably (MPI 4.0 deprecates it; Open MPI's ob1 ignores it), so it
  // is freed and may still complete on its own. With a request left pending, MPI_Finalize could
  // wait for a peer that never comes.
  {
    MpiLock lock;
    if (request_ != MPI_REQUEST_NULL) MPI_Request_free(&request_);
  }
  request_ = MPI_REQUEST_NULL;
  mark_mpi_unfinishable();
}

}  // namespace tessera::dist::detail
