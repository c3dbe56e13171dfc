// Communicator: the interface a backend implements (gloo, mpi, shm; nccl later). It is synchronous
// and sees only byte buffers, ranks and deadlines; ProcessGroup (process_group.h) adds what every
// backend shares on top: the asynchronous Work queue, sequence numbers, Avg, tensor checks, the
// debug-mode call check, and the timeout report that names the ranks that never arrived.
//
// Threading contract: ProcessGroup calls the collectives from one thread at a time, in the same
// order on every rank. post_send/post_recv may be called from any thread, concurrently with a
// collective (pipeline schedules overlap the two), and return at once.
//
// Device contract: a backend takes the buffers of the devices takes() names (the host only, unless
// it says otherwise). A backend that takes a device's buffers (NCCL, CUDA-IPC) runs each call on its
// own stream for that device (stream()): the call issues the operation there and returns, and the
// data is ready when that stream reaches the call's end. ProcessGroup orders that stream after the
// caller's compute stream (an event recorded when the call was issued) and records the end into
// the operation's Work, so no host thread waits between the compute and the collective.
//
// Failure contract: every call returns by `deadline` or throws. TimeoutError when the deadline
// passes; PeerFailureError when a peer is known to be gone (connection reset, process exited). The
// message names the backend, the operation and the peer where the backend knows it. After a
// failure the communicator is not used again (ProcessGroup marks itself broken).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/stream.h"
#include "tessera/dist/types.h"

namespace tessera::dist {

// A point-to-point transfer in flight: wait() blocks until the buffer may be reused (send) or holds
// the message (recv).
class PendingTransfer {
 public:
  virtual ~PendingTransfer() = default;
  virtual void wait(Deadline deadline) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* backend_name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place over `data` on every rank. op is Avg only when reduces_average() (else ProcessGroup
  // sums, then divides); the same holds for reduce and reduce_scatter.
  virtual void allreduce(Buffer data, ReduceOp op, Deadline deadline) = 0;
  // `data` of root to every rank.
  virtual void broadcast(Buffer data, int root, Deadline deadline) = 0;
  // The reduction lands in `data` on root; other ranks' `data` is left unspecified.
  virtual void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) = 0;
  // output = concat over ranks r of r's input; counts[r] elements from rank r (counts.size() ==
  // size(), input.count == counts[rank()], output.count == sum(counts)). Equal or unequal.
  virtual void allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) = 0;
  // input holds sum(counts) elements on every rank; rank r receives the reduction of segment r
  // (counts[r] elements, at offset sum(counts[0..r))) in `output`.
  virtual void reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op,
                              Deadline deadline) = 0;
  // input and output hold size() equal blocks; block j of input goes to rank j, and block r of
  // output comes from rank r.
  virtual void alltoall(Buffer input, Buffer output, Deadline deadline) = 0;
  virtual void barrier(Deadline deadline) = 0;

  virtual std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag) = 0;
  virtual std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag) = 0;

  // A communicator over `ranks` (sorted, unique, containing rank()), in which this process has
  // rank index-of(rank()). Called by the members only, in the same order on each; `store` is
  // private to the new group (a PrefixStore), so backends may rendezvous through it.
  virtual std::unique_ptr<Communicator> split(std::span<const int> ranks, std::shared_ptr<Store> store,
                                              Milliseconds timeout) = 0;

  // Symmetric memory (NCCL's registered buffers, PyTorch's SymmetricMemory): called by every rank,
  // in collective order, it gives each rank `bytes` of zeroed memory that its peers can reach. An
  // allreduce over a buffer at the same offset of such memory on every rank may then skip the
  // copies through the backend's own buffers. nullptr: this backend has none (use ordinary memory).
  // The memory lives as long as the returned pointer, even past the communicator.
  virtual std::shared_ptr<void> allocate_symmetric(size_t /*bytes*/, Deadline /*deadline*/) { return nullptr; }

  // Whether this backend moves buffers of `device` (host backends: the CPU only).
  virtual bool takes(Device device) const { return device.is_cpu(); }
  // The stream this backend runs `device`'s operations on (null for the CPU: a call's work is done
  // when it returns).
  virtual Stream* stream(Device /*device*/) { return nullptr; }

  // Whether allreduce, reduce and reduce_scatter take ReduceOp::Avg: the sum divided by size()
  // (int64: truncated; bf16: summed in float32, divided, rounded once), in the reduction's own pass.
  virtual bool reduces_average() const { return false; }
  // Whether abort() works: the process group runs an operation on the thread that waits for it
  // only then, since the collective check must be able to get that thread out of a collective.
  virtual bool abortable() const { return false; }
  // Makes the collective waiting now, and every later one, fail within about 20 ms of its next
  // sleep (the group is broken; its first error is what the callers see). Thread-safe. A no-op unless abortable().
  virtual void abort() {}
  // abort(), and this rank leaves for good: where the backend can tell its peers (shm's shared
  // counters, tcp's connections shut down), their waits for this rank end with a PeerFailureError. A live job's survivors
  // (live_membership.h) leave a failed group so that no member stays waiting in it.
  virtual void leave() { abort(); }
};

}  // namespace tessera::dist
