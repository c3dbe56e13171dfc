#include "tessera/dist/launcher/rendezvous.h"

#include <csignal>
#include <pthread.h>

#include "tessera/dist/store/tcp_store_server.h"

namespace tessera::dist::launcher {

namespace {

class TcpRendezvousServer : public RendezvousServer {
 public:
  explicit TcpRendezvousServer(TcpStoreServerOptions options) : server_(std::move(options)) {}
  int port() const override { return server_.port(); }

 private:
  TcpStoreServer server_;
};

// Blocks SIGINT, SIGTERM and SIGCHLD in this thread for its lifetime. A thread started meanwhile
// inherits the mask, so the server thread never takes the launcher's signals (they would only
// interrupt its poll()); the launcher's own thread unblocks them in SignalPipe.
class BlockLauncherSignals {
 public:
  BlockLauncherSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&set, s);
    ::pthread_sigmask(SIG_BLOCK, &set, &previous_);
  }
  ~BlockLauncherSignals() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

 private:
  sigset_t previous_;
};

}  // namespace

std::unique_ptr<RendezvousServer> start_rendezvous_server(const std::string& host, int port,
                                                          const std::string& token) {
  BlockLauncherSignals blocked;
  TcpStoreServerOptions options;
  options.host = host;
  options.port = static_cast<uint16_t>(port);
  options.token = token;
  return std::make_unique<TcpRendezvousServer>(std::move(options));
}

}  // namespace tessera::dist::launcher
