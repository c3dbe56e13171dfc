// ParameterServer: one of S server processes of a parameter-server job (TensorFlow's
// ParameterServerStrategy, ps-lite). It holds its share of every parameter (shard_plan.h) and the
// optimizer state of that share, and serves W workers over the framed TCP transport:
//
//   synchronous   gradients of step t from every worker are averaged, then one update is applied;
//                 a pull for step t+1 waits for it. Equals data-parallel training.
//   asynchronous  each push is applied at once; a pull gets the newest values.
//   bounded       as asynchronous, but a pull for step t waits until the slowest live worker has
//   staleness     pushed step t - staleness (SSP): no worker runs more than `staleness` steps ahead.
//
// Faults: a worker whose connection closes before it said done, or that is silent for `timeout`
// while not waiting on us, is lost. Synchronous training cannot go on without it (run() throws,
// naming it); the other modes log it and go on with the rest. run() returns once every worker has
// finished or been lost.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/dist/store/store.h"
#include "tessera/parallel/ps/consistency.h"
#include "tessera/parallel/ps/server_checkpoint.h"  // server_checkpoint_path
#include "tessera/parallel/ps/shard_optimizer.h"

namespace tessera::parallel::ps {

using dist::Bytes;
using dist::Milliseconds;

struct ServerOptions {
  int server_rank = 0;
  int num_servers = 1;
  int num_workers = 1;
  Mode mode = Mode::kSync;
  int64_t staleness = 0;  // bounded staleness: the most steps a worker may run ahead of the slowest
  OptimizerSpec optimizer;
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  uint16_t port = 0;               // 0: a free port
  std::string token;               // the job token every worker presents; required
  Milliseconds timeout{300000};    // for every worker to connect; a worker silent this long is lost
  size_t max_message_bytes = size_t(256) << 20;
  int keep_checkpoints = 2;        // shard files kept per server
  std::function<void(const std::string&)> log;  // default: stderr
};

struct ServerReport {
  int64_t updates = 0;        // optimizer steps applied
  int64_t pushes = 0, pulls = 0;
  int64_t bytes_received = 0, bytes_sent = 0;  // payload of pushes and pulls
  int64_t max_staleness = 0;  // largest (pull's step - slowest live worker's clock) served
  int64_t elements = 0;       // parameter elements this server holds
  std::vector<int> finished_workers, lost_workers;
};

class ParameterServer {
 public:
  // Binds and listens (IoError naming the address when it cannot).
  explicit ParameterServer(ServerOptions options);
  ~ParameterServer();
  std::string address() const;  // "host:port", what workers connect to
  uint16_t port() const;
  // Serves until every worker has finished or been lost. PeerFailureError in synchronous mode when a
  // worker is lost; TimeoutError when workers never connect.
  ServerReport run();
  void stop();  // from another thread: run() returns early

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};


// Servers publish their addresses in the job's rendezvous store; workers look them up.
void publish_server_address(dist::Store& store, int server_rank, const std::string& address);
std::vector<std::string> lookup_server_addresses(dist::Store& store, int num_servers);

}  // namespace tessera::parallel::ps
