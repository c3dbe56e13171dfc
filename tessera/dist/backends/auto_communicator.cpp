// auto: the fastest backend this job can use, per operation.
//   - every rank on one machine (the launcher's LOCAL_WORLD_SIZE == WORLD_SIZE): shm, collectives
//     and point-to-point. Measured (bench/compare_comm.py, see docs/benchmarks.md): shm's all-reduce
//     busbw is above gloo's over loopback at every size from 4 KiB to 256 MiB with 2 and 4
//     processes, so there is no size threshold; a pipeline's 64 KiB activation takes 31 us one way
//     over shm against 285 us over gloo (`tessera bench model-parallel`, one session).
//     TESSERA_SHM_P2P=0 sends point-to-point over gloo instead, as before shm had it.
//   - a group that does not know how many of its ranks share a machine (local_size 0: live
//     membership's, dist/live_membership.h): the ranks tell each other their address through the
//     store first, and the group is then one of the two others. (A hierarchical group on one
//     machine would reduce-scatter over tcp's ring, summing in another order than shm's.)
//   - ranks on several machines: our tcp collectives (tcp/tcp_communicator.h), hierarchical when a
//     host has several ranks (shared memory inside it, hierarchical_communicator.cpp); point-to-point
//     on gloo. Measured between two test hosts (docs/benchmarks.md): tcp's 4 KiB all-reduce 26 us
//     against gloo's 293 us, 1.50 GB/s against 1.22 at 64 MiB; 2 hosts x 2 processes, hierarchical
//     98 us against gloo's 4.1 ms.
// The communicators are built eagerly at every rank, since each rendezvous needs all ranks.
#include "tessera/dist/backends/backend.h"

#include <string>

#include "tessera/dist/backends/shm/shm_communicator.h"
#include "tessera/dist/backends/tcp/tcp_mesh.h"
#include "tessera/dist/net/interface.h"
#include "tessera/dist/store/prefix_store.h"
#include "tessera/util/settings.h"

namespace tessera::dist {

namespace {

class AutoCommunicator : public Communicator {
 public:
  AutoCommunicator(std::unique_ptr<Communicator> collectives, std::unique_ptr<Communicator> point_to_point)
      : collectives_(std::move(collectives)), point_to_point_(std::move(point_to_point)) {}

  const char* backend_name() const override { return "auto: shm + gloo p2p"; }
  int rank() const override { return collectives_->rank(); }
  int size() const override { return collectives_->size(); }

  void allreduce(Buffer data, ReduceOp op, Deadline deadline) override { collectives_->allreduce(data, op, deadline); }
  void broadcast(Buffer data, int root, Deadline deadline) override { collectives_->broadcast(data, root, deadline); }
  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override {
    collectives_->reduce(data, op, root, deadline);
  }
  void allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) override {
    collectives_->allgather(input, output, counts, deadline);
  }
  void reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op,
                      Deadline deadline) override {
    collectives_->reduce_scatter(input, output, counts, op, deadline);
  }
  void alltoall(Buffer input, Buffer output, Deadline deadline) override {
    collectives_->alltoall(input, output, deadline);
  }
  void barrier(Deadline deadline) override { collectives_->barrier(deadline); }
  bool reduces_average() const override { return collectives_->reduces_average(); }
  bool takes(Device device) const override { return collectives_->takes(device); }
  Stream* stream(Device device) override { return collectives_->stream(device); }
  std::shared_ptr<void> allocate_symmetric(size_t bytes, Deadline deadline) override {
    return collectives_->allocate_symmetric(bytes, deadline);
  }
  // Point-to-point bypasses the group's queue, so aborting the collectives is what the check needs.
  bool abortable() const override { return collectives_->abortable(); }
  void abort() override { collectives_->abort(); }
  void leave() override { collectives_->leave(); }
  std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag) override {
    return point_to_point_->post_send(data, peer, tag);
  }
  std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag) override {
    return point_to_point_->post_recv(data, peer, tag);
  }
  std::unique_ptr<Communicator> split(std::span<const int> ranks, std::shared_ptr<Store> store,
                                      Milliseconds timeout) override {
    auto collectives = collectives_->split(ranks, std::make_shared<PrefixStore>("collectives", store), timeout);
    auto p2p = point_to_point_->split(ranks, std::make_shared<PrefixStore>("p2p", store), timeout);
    return std::make_unique<AutoCommunicator>(std::move(collectives), std::move(p2p));
  }

 private:
  std::unique_ptr<Communicator> collectives_;
  std::unique_ptr<Communicator> point_to_point_;
};

}  // namespace

namespace {

// How many of the group's ranks are on this rank's machine (the same advertised address, as the
// hierarchical communicator groups them, and the same machine as shm tells it), where nobody said.
int ranks_on_this_machine(const BackendContext& context) {
  Store& store = *context.store;
  const std::string mine = tessera::detail::concat(detail::advertised_address(), " on ", detail::machine_identity());
  store.set(tessera::detail::concat("auto/host/", context.rank), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < context.size; ++r) keys.push_back(tessera::detail::concat("auto/host/", r));
  store.wait(keys, context.timeout);
  int here = 0;
  for (const std::string& key : keys) here += store.get_string(key) == mine ? 1 : 0;
  return here;
}

}  // namespace

std::unique_ptr<Communicator> make_auto_communicator(const BackendContext& given) {
  if (given.size == 1) return make_gloo_communicator(given);
  BackendContext context = given;
  if (context.local_size <= 0) context.local_size = ranks_on_this_machine(context);
  if (context.local_size != context.size)
    return make_hierarchical_communicator(context, detail::tcp_bind_host(context.local_size, context.size));
  BackendContext shm = context, gloo = context;
  shm.store = std::make_shared<PrefixStore>("collectives", context.store);
  if (env_flag("TESSERA_SHM_P2P", true)) return make_shm_communicator(shm);
  gloo.store = std::make_shared<PrefixStore>("p2p", context.store);
  return std::make_unique<AutoCommunicator>(make_shm_communicator(shm), make_gloo_communicator(gloo));
}

}  // namespace tessera::dist
