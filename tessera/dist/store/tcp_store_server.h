// TcpStoreServer: the rendezvous store's server, hosted by the launcher (or rank 0). One thread
// runs the framed server's poll() loop (net/framed_server.h: accept, framing, the hello and its
// token, limits, slow readers) over every client, so a thousand ranks cost a thousand file
// descriptors, not a thousand threads. Blocking get/wait requests hold their connection in a
// waiting list and are answered when their keys appear or their timeout passes.
//
// Security model: the store listens on loopback unless told otherwise, and every connection must
// first present the job token; a wrong token is answered kRejected and closed before any command
// runs. Every length read from the network is checked against max_message_bytes (and a hello
// against a much smaller bound), so a stray or hostile peer can get its connection dropped, with a
// logged reason, but cannot crash the server or make it allocate more than one frame's worth.
#pragma once
#include <cstdint>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace tessera::dist {

struct TcpStoreServerOptions {
  std::string host = "127.0.0.1";  // "0.0.0.0" or "::" to serve other machines
  uint16_t port = 0;               // 0 picks a free port; port() tells which
  std::string token;               // the job token every client must present; required
  size_t max_message_bytes = size_t(64) << 20;
  int backlog = 1024;             // a job's ranks all connect at once
  size_t max_connections = 65536;  // further connections are accepted and closed, with a log line
  // A connection that has not presented its hello by then is closed, with a log line: silent
  // connections cannot hold the slots the job's ranks need.
  std::chrono::milliseconds hello_timeout{10000};
  // Where the server reports dropped connections (malformed frames, wrong tokens). Called on the
  // server thread. Default: one line on stderr.
  std::function<void(const std::string&)> log;
};

class TcpStoreServer {
 public:
  // Binds, listens and starts the server thread; IoError naming host:port when it cannot listen,
  // ValueError when the token is empty.
  explicit TcpStoreServer(TcpStoreServerOptions options);
  ~TcpStoreServer();  // stop()
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }
  std::string address() const;  // "host:port"
  // Closes the listening socket and every connection, then joins the thread; idempotent. Clients
  // blocked in get/wait see the connection close and raise PeerFailureError at once.
  void stop();

 private:
  struct State;
  std::string host_;
  uint16_t port_ = 0;
  std::unique_ptr<State> state_;
  std::thread thread_;
};

}  // namespace tessera::dist
