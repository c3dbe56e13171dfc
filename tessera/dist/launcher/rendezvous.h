// The rendezvous store that `tessera run` hosts on node 0 for as long as the job runs, at
// MASTER_ADDR:MASTER_PORT, guarded by the job token (issue 4: "an embedded TCP server hosted by the
// launcher, the default").
#pragma once
#include <memory>
#include <string>

namespace tessera::dist::launcher {

// Alive while the job runs; destroying it stops the server.
class RendezvousServer {
 public:
  virtual ~RendezvousServer() = default;
  virtual int port() const = 0;  // the port it listens on (the kernel's choice when asked for 0)
};

// Starts a TcpStoreServer (tessera/dist/store/tcp_store_server.h) at host:port (port 0: any free
// port) that accepts only clients presenting `token`. IoError when it cannot listen there.
std::unique_ptr<RendezvousServer> start_rendezvous_server(const std::string& host, int port,
                                                          const std::string& token);

}  // namespace tessera::dist::launcher
