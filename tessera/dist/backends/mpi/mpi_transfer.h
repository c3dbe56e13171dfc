// MpiTransfer: one MPI_Isend or MPI_Irecv in flight, the mpi backend's PendingTransfer.
#pragma once
#include <mpi.h>

#include <memory>

#include "tessera/dist/communicator.h"

namespace tessera::dist::detail {

class MpiTransfer : public PendingTransfer {
 public:
  enum class Kind { Send, Recv };

  // Posts the transfer of `data` to / from `peer` of `comm` (where this process is `rank`); Error
  // naming both ranks when MPI refuses it.
  static std::unique_ptr<MpiTransfer> post(Kind kind, Buffer data, int peer, int tag, MPI_Comm comm, int rank);
  // A transfer never waited on is cancelled (recv) or left to finish on its own (send).
  ~MpiTransfer() override;
  MpiTransfer(const MpiTransfer&) = delete;
  MpiTransfer& operator=(const MpiTransfer&) = delete;

  // TimeoutError "[mpi recv] rank R: from rank P (tag T) not complete after N ms" at the deadline,
  // after cancelling the request where MPI can; PeerFailureError when MPI reports a failure.
  void wait(Deadline deadline) override;

 private:
  MpiTransfer(Kind kind, int rank, int peer, int tag);
  const char* op() const { return kind_ == Kind::Send ? "send" : "recv"; }
  std::string route() const;  // "to rank 3 (tag 7)"
  void abandon();

  Kind kind_;
  int rank_, peer_, tag_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace tessera::dist::detail
