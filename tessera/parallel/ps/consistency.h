// When a parameter server applies what its workers push and when it answers their pulls: the three
// consistency rules of parameter-server training, apart from the connections they arrive on
// (server.cpp). Li et al., "Scaling Distributed Machine Learning with the Parameter Server" (OSDI
// 2014), and Ho et al., "More Effective Distributed ML via a Stale Synchronous Parallel Parameter
// Server" (NIPS 2013):
//   sync   every active worker's gradients of step t are summed, then averaged and applied once;
//          a pull for step t+1 waits for that update (equal to one process on the global batch)
//   async  each push is applied as it arrives; a pull is answered at once
//   ssp    as async, but a pull for step t waits until the slowest worker has pushed step
//          t - staleness (bounded staleness)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/parallel/ps/server_shard.h"

namespace tessera::parallel::ps {

enum class Mode { kSync, kAsync, kBoundedStaleness };
Mode parse_mode(const std::string& name);  // sync | async | ssp
std::string mode_name(Mode mode);

// The rows of one sparse piece a push carries: local row ids and their gradients.
struct RowsPush {
  HeldPiece* piece;
  std::vector<int64_t> rows;
  std::vector<float> grads;
};

class ConsistencyRule {
 public:
  ConsistencyRule(Mode mode, int64_t staleness);
  Mode mode() const { return mode_; }
  int64_t staleness() const { return staleness_; }
  // Updates applied so far: the step the servers' values are at.
  int64_t version() const { return version_; }
  void restore_version(int64_t version) { version_ = version; }

  // Why a push of step `clock` is refused (sync: a step other than the servers'), or nullopt.
  std::optional<std::string> refuse_push(int64_t clock, int rank) const;
  // Whether a push's dense gradients are added to the step's sum (sync) or replace the last push's.
  bool sums_pushes() const { return mode_ == Mode::kSync; }
  // A push read into the shard's dense gradients, with its sparse rows and its lr: applied now
  // (async, ssp) or counted towards the step (sync). Returns whether the values changed.
  bool on_push(ServerShard& shard, double lr, std::vector<RowsPush>& rows);
  // Sync: once every active worker has pushed the step, its average is applied. Returns whether it was.
  bool complete_step(ServerShard& shard, int active_workers);
  // Whether a pull for step `pull_clock` may be answered, the slowest active worker having pushed
  // `slowest_clock` steps.
  bool may_serve(int64_t pull_clock, int64_t slowest_clock) const;
  // Whether losing a worker ends the job (sync: its gradients are part of every step).
  bool needs_every_worker() const { return mode_ == Mode::kSync; }
  // "sync mode" or "ssp mode, staleness 2", for the log.
  std::string describe() const;

 private:
  Mode mode_;
  int64_t staleness_;
  int64_t version_ = 0;
  int sync_pushes_ = 0;   // gradients received for the current synchronous step
  double sync_lr_ = 0.0;  // the step's lr, as its pushes carry it
};

}  // namespace tessera::parallel::ps
