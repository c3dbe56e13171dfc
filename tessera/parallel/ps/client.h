// PsClient: a worker's connections to every parameter server, speaking protocol.h. It routes each
// parameter's pieces and each embedding row to the server that holds it (the same ShardPlan the
// servers compute), sends to all servers before waiting on any, and counts every byte it moves.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/dist/net/framed_client.h"
#include "tessera/parallel/ps/shard_plan.h"
#include "tessera/parallel/ps/shm_channel.h"

namespace tessera::parallel::ps {

using dist::Bytes;
using dist::Milliseconds;

struct ClientOptions {
  int rank = 0;                            // this worker
  std::vector<std::string> servers;        // "host:port" of server 0..S-1
  std::string token;
  Milliseconds timeout{300000};            // connect, and every reply (a synchronous pull waits for the slowest worker)
  size_t max_message_bytes = size_t(256) << 20;
};

// Payload bytes (values, gradients and row ids; not frame headers).
struct ClientCounters {
  int64_t dense_bytes_pushed = 0, dense_bytes_pulled = 0;
  int64_t sparse_rows_pushed = 0, sparse_rows_pulled = 0;
  int64_t sparse_bytes_pushed = 0, sparse_bytes_pulled = 0;  // row values and their ids
  double wait_seconds = 0.0;  // blocked on servers' replies
  int64_t total_bytes() const {
    return dense_bytes_pushed + dense_bytes_pulled + sparse_bytes_pushed + sparse_bytes_pulled;
  }
};

// The rows of one sparse parameter: sorted, distinct global row ids, and ids.size() x row_size values.
struct SparseRows {
  int param = 0;
  const std::vector<int64_t>* ids = nullptr;
  const float* grads = nullptr;  // for push
  float* out = nullptr;          // for pull
};

class PsClient {
 public:
  explicit PsClient(ClientOptions options);
  ~PsClient();

  // Every worker registers the model (a mismatch with the first worker's is an error naming the
  // parameter). `start_clock`: the step this worker starts at (0, or the resumed step).
  void register_model(std::vector<ParamSpec> specs, int64_t start_clock);
  const ShardPlan& plan() const { return *plan_; }
  // After register_model: offers each server a shared-memory channel for the dense values
  // (shm_channel.h). A server on another machine declines, and that server's values go over TCP.
  // TESSERA_PS_SHM=0 offers none. Returns how many servers accepted.
  int attach_shared_memory();
  int shared_memory_servers() const;
  // The attached segment (null when no server took it): the dense gradients and values of the whole
  // model in the plan's dense layout. A caller that keeps its parameters and gradients there
  // (PsWorker) moves them with no copy on this side: push and pull copy only where the pointers
  // they are given are not the segment's own.
  const std::shared_ptr<ShmChannel>& shared_memory() const { return shm_; }
  // Worker 0 only, once: the initial values of every parameter (dense and sparse), in spec order.
  void initialize(const std::vector<const float*>& values);
  // Worker 0 only, instead of initialize(): every server loads its shard of checkpoint `step`.
  void restore(const std::string& dir, int64_t step);
  void save(const std::string& dir, int64_t step);

  // The gradients of step `clock` (this worker's clock-th push): dense ones per parameter in spec
  // order (nullptr for a sparse parameter, or a dense one without a gradient: zeros are sent), and
  // the rows of sparse parameters.
  void push(int64_t clock, double lr, const std::vector<const float*>& dense_grads, const std::vector<SparseRows>& rows);
  // Values for step `clock`: every dense parameter into dense_out (in spec order; nullptr entries
  // for sparse ones) when with_dense, and the requested rows. Waits as the servers' mode says.
  void pull(int64_t clock, const std::vector<float*>& dense_out, const std::vector<SparseRows>& rows, bool with_dense = true);
  // push(clock, ...) then pull(clock + 1, dense_out, {}), with both requests sent before either
  // reply is awaited: one wait on the servers per step instead of two. A server answers the
  // requests of one connection in order, so the pull still sees this push applied as its mode says.
  void push_then_pull(int64_t clock, double lr, const std::vector<const float*>& dense_grads,
                      const std::vector<SparseRows>& rows, const std::vector<float*>& dense_out);
  // This worker has finished; the servers stop counting on it.
  void done();

  const ClientCounters& counters() const { return counters_; }
  int64_t server_version() const { return version_; }

 private:
  // Sends one frame to each server (empty frames are skipped), then reads each reply.
  std::vector<Bytes> round_trip(std::vector<Bytes> frames, const std::string& what);
  // The same for several requests per server, sent in order before any reply is read:
  // replies[k][i] answers requests[k][i]. The reply buffers are reused (steps of megabytes
  // allocate nothing). PeerFailureError for a kError reply.
  void exchange(std::span<std::vector<Bytes>* const> requests, std::span<std::vector<Bytes>* const> replies,
                const std::string& what);
  // The kPush frames of one step into push_frames_, and the kPull frames into pull_frames_.
  void write_push(int64_t clock, double lr, const std::vector<const float*>& dense_grads, const std::vector<SparseRows>& rows);
  using Splits = std::vector<std::vector<std::pair<size_t, size_t>>>;
  void write_pull(int64_t clock, const std::vector<SparseRows>& rows, const Splits& splits, bool with_dense);
  // Reads the kValues or kValuesInShm replies in pull_replies_ into dense_out and the rows.
  void read_values(const std::vector<float*>& dense_out, const std::vector<SparseRows>& rows, const Splits& splits,
                   const std::string& what);
  void expect_ok(const Bytes& reply, size_t server, const std::string& what);
  // Splits a sparse request over the servers: per server, the [begin, end) index range of ids.
  std::vector<std::pair<size_t, size_t>> split_rows(const SparseRows& rows) const;

  ClientOptions options_;
  std::vector<std::unique_ptr<dist::net::FramedClient>> servers_;
  std::optional<ShardPlan> plan_;
  ClientCounters counters_;
  int64_t version_ = 0;
  // Per server, kept from step to step for their memory.
  std::vector<Bytes> push_frames_, pull_frames_, push_replies_, pull_replies_;
  bool through_shm(size_t server) const;  // that server's dense values go through shm_
  std::shared_ptr<ShmChannel> shm_;        // one segment, mapped by every server on this machine
  std::vector<bool> shm_attached_;         // per server
};

}  // namespace tessera::parallel::ps
