// Hierarchical collectives for a job of H hosts with several ranks on some of them: the all-reduce
// is reduced inside each host over shared memory to the host's lowest rank (its leader), all-reduced
// between the H leaders over our TCP collectives, and broadcast inside each host again.
//
// Cost, for n bytes, P ranks on a host, shared memory at s bytes/s and links of b bytes/s per
// direction with one-way latency a:
//     hierarchical:  2 n/s  +  2(H-1) * (a + n/(H b))   (recursive doubling below kTcpSmallBytes:
//                                                        log2(H) * (a + n/b))
//     flat tcp ring: 2(HP-1) * (a + n/(HP b))            every hop, even inside a host, over TCP
// Both move about 2n across each host's link, but the flat ring pays 2(HP-1) latencies instead of
// 2(H-1) and sends the intra-host hops through the kernel's TCP stack instead of a memcpy.
//
// Only all-reduce, reduce and barrier take the two-level path (what DDP, ZeRO and the optimizers'
// reductions use); the other collectives and point-to-point run on a flat tcp communicator over all
// ranks, built beside it. Hosts are told apart by an id each rank publishes in the store: under auto,
// the address it advertises (the interface that reaches the master: net/interface.h).
#include <algorithm>
#include <map>

#include "tessera/core/error.h"
#include "tessera/dist/backends/backend.h"
#include "tessera/dist/store/prefix_store.h"

namespace tessera::dist {

using tessera::detail::concat;

namespace {

class HierarchicalCommunicator : public Communicator {
 public:
  HierarchicalCommunicator(std::unique_ptr<Communicator> flat, std::unique_ptr<Communicator> host,
                           std::unique_ptr<Communicator> leaders)
      : flat_(std::move(flat)), host_(std::move(host)), leaders_(std::move(leaders)) {}

  const char* backend_name() const override { return "auto: shm within hosts + tcp between them"; }
  bool abortable() const override {
    return flat_->abortable() && host_->abortable() && (!leaders_ || leaders_->abortable());
  }
  void leave() override {
    flat_->leave();
    host_->leave();
    if (leaders_) leaders_->leave();
  }
  void abort() override {
    flat_->abort();
    host_->abort();
    if (leaders_) leaders_->abort();
  }
  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }

  void allreduce(Buffer data, ReduceOp op, Deadline deadline) override {
    host_->reduce(data, op, 0, deadline);
    if (leaders_) leaders_->allreduce(data, op, deadline);
    host_->broadcast(data, 0, deadline);
  }
  void reduce(Buffer data, ReduceOp op, int, Deadline deadline) override { allreduce(data, op, deadline); }
  void barrier(Deadline deadline) override {
    host_->barrier(deadline);
    if (leaders_) leaders_->barrier(deadline);
    host_->barrier(deadline);
  }

  void broadcast(Buffer data, int root, Deadline deadline) override { flat_->broadcast(data, root, deadline); }
  void allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) override {
    flat_->allgather(input, output, counts, deadline);
  }
  void reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op, Deadline deadline) override {
    flat_->reduce_scatter(input, output, counts, op, deadline);
  }
  void alltoall(Buffer input, Buffer output, Deadline deadline) override { flat_->alltoall(input, output, deadline); }
  std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag) override { return flat_->post_send(data, peer, tag); }
  std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag) override { return flat_->post_recv(data, peer, tag); }
  // A sub-group's ranks may sit on the hosts in any pattern: it is flat.
  std::unique_ptr<Communicator> split(std::span<const int> ranks, std::shared_ptr<Store> store, Milliseconds timeout) override {
    return flat_->split(ranks, std::move(store), timeout);
  }

 private:
  std::unique_ptr<Communicator> flat_, host_, leaders_;  // leaders_ only on a host's leader, and only with 2+ hosts
};

Milliseconds left(detail::Clock::time_point deadline) {
  return std::max(Milliseconds(1), std::chrono::ceil<Milliseconds>(deadline - detail::Clock::now()));
}

}  // namespace

std::unique_ptr<Communicator> make_hierarchical_communicator(const BackendContext& context, const std::string& mine) {
  const detail::Clock::time_point deadline = detail::deadline_after(context.timeout);
  Store& store = *context.store;
  // Which ranks share a host.
  store.set(concat("hier/host/", context.rank), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < context.size; ++r) keys.push_back(concat("hier/host/", r));
  store.wait(keys, left(deadline));
  std::map<std::string, std::vector<int>> ranks_of;
  std::vector<std::string> host_of(static_cast<size_t>(context.size));
  for (int r = 0; r < context.size; ++r) {
    host_of[static_cast<size_t>(r)] = store.get_string(keys[static_cast<size_t>(r)]);
    ranks_of[host_of[static_cast<size_t>(r)]].push_back(r);
  }
  BackendContext flat = context;
  flat.store = std::make_shared<PrefixStore>("flat", context.store);
  flat.timeout = left(deadline);
  auto flat_comm = make_tcp_communicator(flat);
  // Every host with one rank: the flat tcp communicator is the whole story.
  if (ranks_of.size() == static_cast<size_t>(context.size)) return flat_comm;

  const std::vector<int>& here = ranks_of[mine];
  BackendContext host;
  host.store = std::make_shared<PrefixStore>(concat("hier/in/", mine), context.store);
  host.rank = static_cast<int>(std::find(here.begin(), here.end(), context.rank) - here.begin());
  host.size = static_cast<int>(here.size());
  host.local_size = host.size;
  host.timeout = left(deadline);
  auto host_comm = make_shm_communicator(host);

  std::unique_ptr<Communicator> leaders_comm;
  if (host.rank == 0 && ranks_of.size() > 1) {
    std::vector<int> leaders;
    for (const auto& [address, ranks] : ranks_of) leaders.push_back(ranks.front());
    std::sort(leaders.begin(), leaders.end());
    BackendContext between;
    between.store = std::make_shared<PrefixStore>("hier/between", context.store);
    between.rank = static_cast<int>(std::find(leaders.begin(), leaders.end(), context.rank) - leaders.begin());
    between.size = static_cast<int>(leaders.size());
    between.local_size = 1;
    between.bind_host = context.bind_host;
    between.timeout = left(deadline);
    leaders_comm = make_tcp_communicator(between);
  }
  return std::make_unique<HierarchicalCommunicator>(std::move(flat_comm), std::move(host_comm), std::move(leaders_comm));
}

}  // namespace tessera::dist
