// Which address of this machine the other hosts of a job reach it at. A machine has several (the
// loopback, one per interface), and its hostname may not resolve on the others, or at all: binding
// to 127.0.0.1 or to the hostname blindly is how multi-host jobs break (a peer that cannot connect,
// or a library that crashes on a name it cannot resolve). The rule, as NCCL's and Gloo's users set
// it by hand (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME):
//   1. TESSERA_SOCKET_IFNAME names the interface: its IPv4 address;
//   2. else the source address the routing table picks towards the master (MASTER_ADDR), which is
//      the interface that reaches it;
//   3. else (no master known) the hostname, if it resolves.
// Every failure is an error that names what was tried and how to fix it.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tessera::dist::detail {

// (interface, IPv4 address) of every interface that has one, for messages and `tessera doctor`.
std::vector<std::pair<std::string, std::string>> ipv4_interfaces();

// The IPv4 address of interface `name`; ValueError naming the interfaces there are when it has none.
std::string address_of_interface(const std::string& name);

// The local address the kernel would send from towards `host` (no packet is sent: a UDP socket is
// connected and asked its name). Error naming the host when it does not resolve or has no route.
std::string address_towards(const std::string& host);

// The address this process advertises to its peers, by the rule above.
std::string advertised_address();

// Where a server of a job that meets at `peer_host` (`what` names it in errors) listens: loopback
// when that host is this machine's loopback (a job on one machine, reachable from nowhere else),
// else TESSERA_SOCKET_IFNAME's address or the one the route towards `peer_host` leaves from.
std::string listen_address(const std::string& peer_host, const std::string& what);

// `host` resolved to an IPv4 address (a literal stays as it is); Error naming it when it does not resolve.
std::string resolve_ipv4(const std::string& host, const std::string& what);

}  // namespace tessera::dist::detail
