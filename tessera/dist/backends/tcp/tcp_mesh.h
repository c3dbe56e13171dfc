// TcpMesh: one TCP connection between every pair of a group's ranks, made through the group's store,
// for our own collectives (tcp_communicator.h).
//
// The rendezvous, in one place:
//   store "tcp/key"       16 random bytes as hex, set by rank 0: the mesh key. Only processes that
//                         can read the (token-checked) store learn it, so a stray or hostile
//                         connection to a rank's listening port cannot join the mesh.
//   store "tcp/addr/<r>"  "host:port" where rank r listens (the address its peers reach it at:
//                         loopback on one machine, else the interface towards the master).
//   rank r connects to every rank below it and sends a hello:
//       u32 kTcpMeshMagic | u32 rank | u32 size | u32 key length | key bytes
//   the lower rank answers one byte (kTcpMeshAccepted) once it has checked the hello, and closes a
//   connection whose hello is malformed, late, for another mesh or from a rank it already has.
// Lower ranks accept only after their own connects, so the order cannot deadlock: rank 0 connects
// to nobody, rank 1 waits only for rank 0, and so on.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/dist/net/socket.h"
#include "tessera/dist/types.h"

namespace tessera::dist::detail {

constexpr uint32_t kTcpMeshMagic = 0x54534D31;  // "TSM1"
constexpr uint8_t kTcpMeshAccepted = 0xA5;

struct TcpMesh {
  int rank = 0, size = 1;
  std::vector<Socket> peers;           // peers[r]: the connection to rank r (none to itself); non-blocking
  std::vector<std::string> addresses;  // addresses[r]: where rank r listened, for error messages
};

// The address this rank listens at: loopback when the whole group is on this machine (local_size ==
// size), else TESSERA_SOCKET_IFNAME's address or the one towards the master (net/interface.h).
std::string tcp_bind_host(int local_size, int size);

// Every rank of the group calls it; TimeoutError naming the missing ranks after `timeout`.
TcpMesh connect_tcp_mesh(Store& store, int rank, int size, const std::string& bind_host, Milliseconds timeout);

}  // namespace tessera::dist::detail
