// Replicas: R processes of `tessera serve --replica`, each with the model and a batcher of its own,
// listening on loopback ports of their own with a token the router made (random, 128 bits). The
// router sends each request to the ready replica with the fewest requests in flight.
//
// Failure handling (the promise of the issue: a killed replica loses no request without an answer):
//   - a replica that dies is reaped by the monitor thread and started again (at most max_restarts
//     times in all), and takes requests again once it reports its port;
//   - a request whose replica fails while answering (connection refused, reset, closed) is sent
//     once more, to another ready replica when there is one (a prediction has no side effects);
//     when that fails too the client gets 503 naming both failures;
//   - with no replica ready, a request waits for one up to the ready timeout, then gets 503.
// Replicas get SIGKILL if the router dies (PR_SET_PDEATHSIG) and SIGTERM (drain) when it stops.
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "tessera/serve/backend.h"
#include "tessera/serve/metrics.h"

namespace tessera::serve {

struct ReplicaOptions {
  int count = 2;
  // A replica's command line (argv[0] is replaced by this executable); the router appends
  // "--ready-fd 3" and passes the token in TESSERA_SERVE_TOKEN.
  std::vector<std::string> argv;
  std::chrono::milliseconds ready_timeout{120000};    // from start to the port reported
  std::chrono::milliseconds forward_timeout{60000};   // one request's round trip to a replica
  int max_restarts = 100;
};

class ReplicaBackend : public Backend {
 public:
  // Starts the replicas and returns once all reported their ports (IoError naming the replica that
  // did not within ready_timeout).
  ReplicaBackend(ReplicaOptions options, ServeMetrics& metrics);
  ~ReplicaBackend() override;
  Reply predict(const std::string& body) override;
  Reply reload() override;
  Reply health() override;
  std::string metrics_extra() override;
  void stop() override;

  std::vector<pid_t> pids() const;  // of the replicas running now (tests kill them)

 private:
  struct Replica {
    pid_t pid = -1;
    int port = 0;
    bool ready = false;
    int in_flight = 0;
    std::string last_exit;  // how the previous process of this slot ended
  };
  struct Picked {
    int index = -1;
    int port = 0;
  };
  struct Connections;  // idle keep-alive clients per replica (replica_backend.cpp)
  void monitor();
  bool spawn(int index);                        // on the monitor thread only
  Picked pick(int avoid, std::chrono::steady_clock::time_point deadline);
  Reply forward_to(int index, int port, const char* method, const std::string& path, const std::string& body,
                   std::string& failure);

  ReplicaOptions options_;
  ServeMetrics& metrics_;
  std::string executable_, token_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Replica> replicas_;
  int restarts_ = 0;
  bool stopping_ = false, started_ = false, monitor_done_ = false;
  size_t next_ = 0;  // round-robin start among equally loaded replicas
  std::thread monitor_;
  std::unique_ptr<Connections> connections_;
};

}  // namespace tessera::serve
