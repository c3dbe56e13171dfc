// GlooCommunicator: communicator.h over gloo's algorithms and its TCP transport.
//
// Two gloo contexts (two full meshes of TCP connections) share one device: one for the
// collectives, which ProcessGroup calls from one thread in the same order on every rank, and one
// for send/recv, which any thread may post at any time. Gloo handles a timeout by closing every
// connection of the context that timed out, so with one context a pipeline's timed-out recv would
// also break the group's collectives (and the peers' too); apart, the two fail separately.
//
// Slots: gloo's collectives build their slots as (collective prefix 0x01-0x08) << 56 | tag << 24;
// send/recv use prefix kPointToPointSlotPrefix, so a user tag can never match a collective's slot
// (and they live on another context anyway).
#pragma once
#include <memory>

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include "tessera/dist/communicator.h"

namespace tessera::dist {

class GlooCommunicator : public Communicator {
 public:
  // Rendezvous through `store` (private to this group) over `device`; bounded by `timeout`.
  GlooCommunicator(std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<Store> store, int rank,
                   int size, Milliseconds timeout);

  const char* backend_name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce(Buffer data, ReduceOp op, Deadline deadline) override;
  void broadcast(Buffer data, int root, Deadline deadline) override;
  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override;
  void allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) override;
  void reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op,
                      Deadline deadline) override;
  void alltoall(Buffer input, Buffer output, Deadline deadline) override;
  void barrier(Deadline deadline) override;

  std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag) override;
  std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag) override;

  std::unique_ptr<Communicator> split(std::span<const int> ranks, std::shared_ptr<Store> store,
                                      Milliseconds timeout) override;

  static constexpr uint64_t kPointToPointSlotPrefix = 0xF0;

 private:
  // Runs one collective: `body(timeout)` with the time left until `deadline`, and gloo's
  // exceptions turned into ours (see fail()).
  template <typename Body> void run(const char* op, Deadline deadline, Body&& body);
  [[noreturn]] void fail(const char* op, const std::exception& error, Deadline deadline);
  uint32_t next_tag() { return next_tag_++; }
  std::unique_ptr<PendingTransfer> post_transfer(bool is_send, Buffer data, int peer, int tag);

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::shared_ptr<gloo::Context> collectives_;
  std::shared_ptr<gloo::Context> point_to_point_;
  // Gloo wants a distinct tag for collectives that may run at the same time. Ours never overlap,
  // but a fresh tag per call also keeps a late message of a failed call out of the next one.
  uint32_t next_tag_ = 0;
};

}  // namespace tessera::dist
