// Live membership: the ranks of a data-parallel job keep running when a peer is lost, and take in
// new ones, without any process restarting (the trainer drives it: train/trainer_live.cpp). This is
// the one contract between the processes of a live job, kept in the job's store under "live/":
//
//   live/e<E>/members       epoch E: "source <rank>" then one line per member in rank order,
//                           "<id> <step> <epoch>" (the position each held when it arrived)
//   live/e<E>/arrivals      counter: how many have asked to be members of epoch E
//   live/e<E>/arrival/<n>   the n-th of them: "<id> <step> <epoch>"
//   live/e<E>/expected      how many will arrive, where that is known (joiners admitted into E)
//   live/e<E>/pg/...        epoch E's process group
//   live/joiners            counter: processes that asked to join the running job (the j-th
//                           learns its number from it; its id comes with its arrival)
//   live/admit/<j>          the epoch joiner j was admitted into
//   live/admitted           how many joiners have been admitted
//   live/done               written by rank 0 when training ends: a joiner not yet admitted stops
//
// Epoch 0 is the launch (ranks 0..W-1; nothing is written for it). A round E -> E+1 opens when a
// collective of epoch E fails (every survivor arrives) or when rank 0 admits waiting joiners at a
// step boundary (every member arrives, and the joiners). The first to arrive closes the round: at
// `expected` arrivals, or once none has come for `settle` after the last. The members of E+1 are
// the arrivals by then: the members of E in their old order, joiners after. The state source is the
// member that got furthest (the highest step; the lowest rank among equals): every member takes its
// parameters, optimizer state and position. A member of E that arrives after the close is not a
// member of E+1 (LateForEpoch): it asks to join, as a new process does.
//
// What this cannot survive: the loss of the store's host (the launcher of node 0, or the elastic
// agent of node 0 for the generation's store), and the loss of the member closing a round before it
// wrote the members (every other arrival's wait then ends, after `round_timeout`, in a TimeoutError
// naming the round; the next try meets in a fresh round). A round of joiners alone never closes: they
// wait for a member or for the job's end (live/done, JobEnded).
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/process_group.h"
#include "tessera/dist/store/store.h"

namespace tessera::dist {

// Where a member is in training: the steps it completed, and its epoch of the data.
struct LivePosition {
  int64_t step = 0, epoch = 0;
  bool operator<(const LivePosition& o) const { return step != o.step ? step < o.step : epoch < o.epoch; }
};

struct LiveEpoch {
  int64_t number = 0;
  std::vector<std::string> ids;         // the members in rank order
  std::vector<LivePosition> positions;  // where each was when it arrived
  int rank = 0;                         // this process's rank in the epoch
  int source = 0;                       // the rank every member takes the training state from
  int size() const { return static_cast<int>(ids.size()); }
};

// A member of epoch E that arrived after E+1 closed: it must join as a new process would.
class LateForEpoch : public Error {
  using Error::Error;
};
// A joiner whose admission has not come within the wait it was given.
class NotAdmittedYet : public TimeoutError {
  using TimeoutError::TimeoutError;
};
// The job ended (rank 0 wrote live/done) while this process waited to be admitted or for a round.
class JobEnded : public Error {
  using Error::Error;
};
// Part of the training state went with the lost processes (ZeRO's pieces of two neighbouring ranks):
// the job cannot go on live (the process exits with launcher::kLiveStateLostExitStatus).
class LiveStateLost : public Error {
  using Error::Error;
};

struct LiveOptions {
  Milliseconds settle{300};          // a round closes once no member has arrived for this long
  Milliseconds timeout{60000};       // the store's waits
  Milliseconds round_timeout{30000};  // for a round's members: then its closer is taken for lost
};

class LiveMembership {
 public:
  // Launch rank `rank` of `world` (epoch 0). `id` names this process in every round ("r2-4711").
  static std::unique_ptr<LiveMembership> launched(std::shared_ptr<Store> root, int rank, int world, LiveOptions options);
  // A process asking to join the running job: registers now; join() waits to be admitted.
  static std::unique_ptr<LiveMembership> asking_to_join(std::shared_ptr<Store> root, std::string id, LiveOptions options);

  // The epoch this process is a member of (after next_epoch or join), or was last.
  const LiveEpoch& current() const { return current_; }
  const std::string& id() const { return id_; }
  // Joiners registered and not yet admitted (two store reads).
  int64_t joiners_waiting();
  // Rank 0, before the step boundary's collective that tells every member: admits every waiting
  // joiner into the next epoch and records how many will arrive. Returns how many it admitted (0,
  // after the same two reads, when nobody waits).
  int64_t admit_joiners();
  // Every member of the current epoch, after a failure or at an admission: the next epoch, which
  // becomes current. LateForEpoch when the round closed without this process.
  const LiveEpoch& next_epoch(LivePosition mine);
  // A process that asked to join (or a late member, which asks again here): waits up to `wait` to
  // be admitted (NotAdmittedYet), then takes part in that round. Returns the epoch it is a member of.
  const LiveEpoch& join(LivePosition mine, Milliseconds wait);
  // Rank 0 when training ends, and whether it has (a joiner waiting for admission asks).
  void mark_job_done();
  bool job_done();
  // The process group of the current epoch over `backend` (shm, tcp, hierarchical or auto); its
  // heartbeats, every `heartbeat` (0: none), go out as the launch rank `heartbeat_rank` of the job's
  // first group, where the elastic agent watches them.
  ProcessGroupPtr make_group(const std::string& backend, Milliseconds timeout, int heartbeat_rank,
                             Milliseconds heartbeat) const;

 private:
  LiveMembership(std::shared_ptr<Store> root, std::string id, LiveOptions options);
  // Arrives at round `number` and, when it is the first to, closes it; then reads the members.
  const LiveEpoch& meet(int64_t number, LivePosition mine);
  // Waits for `key` up to `wait` (TimeoutError), looking every second whether the job has ended
  // (JobEnded).
  void wait_unless_done(const std::string& key, Milliseconds wait, const std::string& waiting_for);
  void close_round(int64_t number);
  // Each member's rank in epoch `number` as the store has it (empty for epoch 0: launch ranks).
  std::map<std::string, int64_t> ranks_in_epoch(int64_t number);
  void register_as_joiner();

  std::shared_ptr<Store> root_;
  std::string id_;
  LiveOptions options_;
  LiveEpoch current_;
  bool member_ = true;        // of current_: false for a joiner, and for a member found late
  int64_t joiner_index_ = 0;  // this process's number among the joiners (0: none)
  int64_t fresh_round_ = 0;   // the lowest round the next next_epoch may meet in
};

// "<id> <step> <epoch>" and back; nullopt for anything else (never trusts a peer's bytes).
std::string format_live_arrival(const std::string& id, LivePosition position);
std::optional<std::pair<std::string, LivePosition>> parse_live_arrival(const std::string& text);
// The members of a round as written to live/e<E>/members, and back (ValueError for anything else).
std::string format_live_members(const LiveEpoch& epoch);
LiveEpoch parse_live_members(int64_t number, const std::string& text, const std::string& my_id);

}  // namespace tessera::dist
