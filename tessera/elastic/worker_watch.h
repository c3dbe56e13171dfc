// What an elastic agent watches in the workers of one generation, through the heartbeats they write
// to node 0's worker store (dist/heartbeat.h) and the step rank 0 publishes there:
//   - a local worker whose heartbeat stopped (hung in a collective, stopped by a debugger, spinning)
//     is reported with what the other ranks wait for in, then killed, so the generation ends;
//   - the step rank 0 reached (for the next generation's "steps lost");
//   - after a membership change, when training resumed and how long that took (node 0);
//   - a rank that is consistently the last to arrive at collectives (straggler_detector.h; node 0).
// Everything it finds goes to the agent's stderr and into the job's ElasticResult.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "tessera/dist/heartbeat.h"
#include "tessera/dist/store/tcp_store.h"
#include "tessera/elastic/elastic_agent.h"
#include "tessera/elastic/rendezvous.h"
#include "tessera/elastic/straggler_detector.h"

namespace tessera::elastic {

struct WorkerWatchOptions {
  std::chrono::milliseconds heartbeat_timeout{30000};
  std::chrono::milliseconds straggler_window{60000};
  int stderr_fd = 2;
};

class WorkerWatch {
 public:
  // This node's workers are ranks [first, first + slots) of `m`.
  WorkerWatch(const Membership& m, int slots, std::shared_ptr<dist::TcpStore> worker_store, const WorkerWatchOptions& options,
              ElasticResult& result);

  // A worker started (or, in a live job, a replacement in a lost worker's slot: its heartbeats are
  // awaited from now, not from the lost one's last).
  void started(int rank, pid_t pid) {
    pids_[rank] = pid;
    stall_reports_.erase(rank);  // a stalled worker's replacement is watched afresh
    if (auto it = beats_.find(rank); it != beats_.end()) it->second.second = std::chrono::steady_clock::now();
  }
  // A live job's worker lost without a replacement: nothing of it is watched any more.
  void forget(int rank) {
    pids_.erase(rank);
    beats_.erase(rank);
  }
  const std::map<int, pid_t>& pids() const { return pids_; }
  // The stall report that preceded `rank`'s end, if this watch killed it.
  std::optional<std::string> stall_report(int rank) const;

  // Reports and kills a local worker whose heartbeat stopped for the timeout.
  void check_workers();
  // Reads the step rank 0 published; last_step() is -1 until it has.
  void poll_step();
  int64_t last_step() const { return last_step_; }
  // What node 0 publishes when its generation ends, as `g<g>/last_step`: the step rank 0 completed
  // last, else the step it resumed at (it completed none), else kNoStepDone (it never started, so no
  // rank completed a step: each needs rank 0's collectives). nullopt when the store cannot be read.
  static constexpr const char* kNoStepDone = "none";
  std::optional<std::string> generation_reach();
  // Node 0 of a generation after a failure, loss or growth: once rank 0 completes a step past the one
  // it resumed at, reports the recovery (once per generation: `reported` is the agent's).
  void check_recovery(Rendezvous& rdzv, std::set<int64_t>& reported);
  // Node 0, every straggler window: the workers' arrivals at their latest collectives.
  void check_stragglers();

 private:
  // The workers' heartbeats; nullopt when node 0's worker store cannot be read. Not fatal: node 0
  // closes it when its generation ends, which can race this read on another node (the grow race),
  // and a node 0 that died is found by its agent's missing heartbeat.
  std::optional<std::map<int, dist::Heartbeat>> read_beats();
  // Whether this generation resumed from a checkpoint the survivors of `generation` saved.
  bool survivors_saved(int64_t generation);

  const Membership m_;
  const int slots_;
  std::shared_ptr<dist::TcpStore> store_;
  const WorkerWatchOptions o_;
  ElasticResult& result_;
  std::map<int, pid_t> pids_;
  std::map<int, std::string> stall_reports_;
  std::map<int, std::pair<int64_t, std::chrono::steady_clock::time_point>> beats_;  // rank -> (count, when it changed)
  StragglerDetector stragglers_;
  int64_t last_step_ = -1;
};

}  // namespace tessera::elastic
