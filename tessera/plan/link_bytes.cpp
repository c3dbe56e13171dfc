#include "tessera/plan/link_bytes.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera::plan {

namespace {

// `bytes` sent from `from` to `to`, on the link between them.
LinkBytes on_link(int from, int to, int64_t bytes, const HostLayout& layout) {
  LinkBytes b;
  (layout.host_of(from) == layout.host_of(to) ? b.within_host : b.between_hosts) += bytes;
  return b;
}

// n-1 of every n parts of `bytes` (rounded down, as a ring's blocks are).
int64_t share(int64_t bytes, int64_t parts, int64_t of) { return of == 0 ? 0 : bytes * parts / of; }

LinkBytes reduction(const dist::DryCall& call, int me, const HostLayout& layout) {
  const int64_t n = static_cast<int64_t>(call.group.size());
  std::set<int> hosts;
  int64_t on_my_host = 0;
  int leader = -1;  // the lowest rank of the group on my host
  for (int r : call.group) {
    hosts.insert(layout.host_of(r));
    if (layout.host_of(r) == layout.host_of(me)) {
      ++on_my_host;
      if (leader < 0 || r < leader) leader = r;
    }
  }
  LinkBytes b;
  const int64_t h = static_cast<int64_t>(hosts.size());
  if (h == 1) {
    b.within_host = share(2 * call.bytes(), n - 1, n);
    return b;
  }
  b.within_host = share(2 * call.bytes(), on_my_host - 1, on_my_host);
  if (me == leader) b.between_hosts = share(2 * call.bytes(), h - 1, h);
  return b;
}

}  // namespace

LinkBytes bytes_sent(const dist::DryCall& call, int me, const HostLayout& layout) {
  const std::vector<int>& g = call.group;
  const auto at = std::find(g.begin(), g.end(), me);
  TESSERA_CHECK(at != g.end(), "[plan] rank ", me, " is not in the group of its ", call.op);
  const int64_t n = static_cast<int64_t>(g.size());
  const size_t index = static_cast<size_t>(at - g.begin());
  const std::string_view op = call.op;
  if (n == 1 && op != "send") return {};
  if (op == "allreduce" || op == "reduce") return reduction(call, me, layout);
  if (op == "allgather" || op == "reduce_scatter")
    return on_link(me, g[(index + 1) % g.size()], share(call.bytes(), n - 1, n), layout);
  if (op == "alltoall") {
    LinkBytes b;
    for (int r : g)
      if (r != me) b += on_link(me, r, call.bytes() / n, layout);
    return b;
  }
  if (op == "broadcast") {
    const size_t root = static_cast<size_t>(std::find(g.begin(), g.end(), call.peer) - g.begin());
    const bool last_of_chain = (index + 1) % g.size() == root;
    return last_of_chain ? LinkBytes{} : on_link(me, g[(index + 1) % g.size()], call.bytes(), layout);
  }
  if (op == "send") return on_link(me, call.peer, call.bytes(), layout);
  return {};  // recv, barrier
}

}  // namespace tessera::plan
