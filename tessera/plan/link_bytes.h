// The bytes one rank puts on each kind of link for one call, under the algorithms the auto backend
// runs (dist/backends/auto_communicator.cpp, hierarchical_communicator.cpp), so that `tessera plan`
// can say what a layout sends across the hosts before anyone has the hosts:
//   all-reduce, reduce: a group inside one host moves 2(n-1)/n of the buffer per rank through shared
//     memory; a group across hosts reduces inside each host (2(p-1)/p, p its ranks there) and the
//     hosts' leaders (a host's lowest rank) exchange 2(H-1)/H of it between the H hosts;
//   all-gather, reduce-scatter: a ring in the group's rank order, each rank sending (n-1)/n of the
//     whole (every rank's parts) to the next;
//   all-to-all: each rank sends its block for every other rank straight to it;
//   broadcast: a chain from the root, every member but the last passing the whole buffer on;
//   send: the message to its peer; recv and barrier: nothing.
// A link is "within a host" (shared memory, or loopback TCP) or "between hosts" (the network).
#pragma once
#include <cstdint>

#include "tessera/dist/backends/dry/dry_communicator.h"

namespace tessera::plan {

// `world` ranks numbered host by host, world / hosts on each (the launcher's numbering).
struct HostLayout {
  int world = 1, hosts = 1;
  int host_of(int rank) const { return rank / (world / hosts); }
};

struct LinkBytes {
  int64_t within_host = 0, between_hosts = 0;
  LinkBytes& operator+=(const LinkBytes& o) {
    within_host += o.within_host;
    between_hosts += o.between_hosts;
    return *this;
  }
};

// What global rank `me` sends for `call` (one of its group's members).
LinkBytes bytes_sent(const dist::DryCall& call, int me, const HostLayout& layout);

}  // namespace tessera::plan
