// The dry backend: what `tessera plan` (tessera/plan/) runs a job's strategies on, one rank at a
// time, with no peers and no wire. Every call returns at once and leaves this rank's buffers as if
// every peer were this rank (a sum is N times this rank's value, an average or a broadcast leaves
// it, a gather repeats this rank's part), so the strategies take the paths, shapes and sizes they
// take in a real job of that size, and no value grows or vanishes on the way. A sum is scaled only
// where it is small (at most DryMailbox::kKeptBytes): a large payload keeps this rank's values,
// since scaling it would cost the rank time that a real backend does not spend on its compute.
// Each call is written to a DryLog (op, dtype, elements, the group's global ranks, the peer), which
// the planner turns into bytes on each kind of link (plan/link_bytes.h); the process group above
// keeps its flight record as it does over any backend, which is what the plan compares with a real
// run's.
#pragma once
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessera/dist/communicator.h"

namespace tessera::dist {

struct DryCall {
  std::string phase;     // the planner's phase when the call was made ("setup", "step 1", ...)
  std::string op;        // allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall, barrier, send, recv
  DType dtype = DType::Float32;
  // The whole payload in elements: an all-reduce's, broadcast's and reduce's buffer; an all-gather's
  // output and a reduce-scatter's input (every rank's parts); an all-to-all's input; a message.
  int64_t elements = 0;
  std::vector<int> group;  // the group's global ranks, in its rank order
  int peer = -1;           // send/recv: the peer; broadcast/reduce: the root (global ranks)

  int64_t bytes() const { return elements * static_cast<int64_t>(dtype_size(dtype)); }
};

// One rank's calls, shared by its world communicator and every split of it. Thread-safe (a pipeline
// posts its sends and receives beside the collectives).
class DryLog {
 public:
  void set_phase(std::string phase);
  void add(DryCall call);
  std::vector<DryCall> calls() const;
  // The communication buffers strategies asked for as symmetric memory (DDP's buckets), by address,
  // so that the plan can tell them from the gradients that live in them. `shared`: outside the
  // tensor allocator, as the shm backend's are (a group inside one host).
  struct SymmetricBuffer {
    const void* data = nullptr;
    size_t bytes = 0;
    bool shared = false;
  };
  // `memory` is watched: a buffer the strategy has freed (DDP's first buckets, rebuilt after step 1)
  // is no longer listed.
  void add_symmetric(SymmetricBuffer buffer, const std::shared_ptr<void>& memory);
  std::vector<SymmetricBuffer> symmetric() const;  // the buffers still alive

 private:
  mutable std::mutex mu_;
  std::string phase_ = "setup";
  std::vector<DryCall> calls_;
  std::vector<std::pair<SymmetricBuffer, std::weak_ptr<void>>> symmetric_;
};

// The messages dry ranks send each other. A pipeline's stage sends a header (the activation's
// shape) before each activation, and the next stage cannot run without it, so messages must reach
// their receivers: when the ranks run at once (threads), a receive waits for its message; when they
// run one at a time, a receive takes what the sender posted in an earlier run (or zeros of the
// right size where there is none: a message whose values the receiver does not look at). Only
// messages of up to kKeptBytes keep their bytes (headers); larger ones arrive as zeros, as the dry
// backend moves no payloads.
// Small collectives carry such facts too (the sizes of the vocabulary's shards that the tensor-
// parallel loss gathers), which differ from rank to rank, so "every peer is this rank" would be
// wrong for them: when the ranks run at once, a collective whose members' inputs (or outputs) come
// to at most kKeptBytes together is computed from every member's real input (published here), and
// each rank's result is kept for its run alone.
// Thread-safe.
class DryMailbox {
 public:
  static constexpr size_t kKeptBytes = 4096;
  // `key` names the group, the sender, the receiver and the tag (messages under one key keep their order).
  void post(const std::string& key, const Buffer& data);
  // The next message under `key` (from global rank `sender`) into `data`. With `wait`, waits for it
  // until `deadline` (TimeoutError), abort() (Error with its reason) or the sender's finish without
  // it (ValueError: the ranks' calls do not match); without, fills zeros when there is none.
  void take(const std::string& key, int sender, Buffer data, bool wait, Deadline deadline);
  // Rank `rank`'s run is over: waits for what it never sent fail at once.
  void finished(int rank);
  // Later posts are ones already made (the same ranks run again): ignored.
  void seal();
  // Reads start again from each key's first message.
  void rewind();
  // Every waiting and later take fails with `why` (a rank's run failed: its messages will not come).
  void abort(const std::string& why);

  // Values that many read, each kept under its own key: the inputs and results of small collectives
  // (below). publish is ignored once sealed; read waits like take (or returns nullopt without `wait`).
  void publish(const std::string& key, const void* data, size_t bytes);
  std::optional<std::vector<char>> read(const std::string& key, int sender, bool wait, Deadline deadline);

 private:
  struct Message {
    size_t bytes = 0;
    std::vector<char> payload;  // empty past kKeptBytes
  };
  std::mutex mu_;
  std::condition_variable arrived_;
  std::map<std::string, std::vector<Message>> messages_;
  std::map<std::string, size_t> read_;
  std::map<std::string, std::vector<char>> published_;
  std::set<int> finished_;
  bool sealed_ = false;
  std::string aborted_;
  // With mu_ held through `lock`: waits until `there()`, or throws what a wait for `key` from
  // `sender` ends with (abort, the sender's finish, `deadline`).
  void wait_for(std::unique_lock<std::mutex>& lock, const std::string& key, int sender, Deadline deadline,
                const std::function<bool()>& there);
};

// Rank `rank` of a dry world of `size` ranks, `ranks_per_host` on each host (0: all on one). Its
// messages go through `mailbox`; `wait_for_messages`: the ranks run at once (see DryMailbox). A
// group inside one host gets its symmetric memory outside the tensor allocator, as over shm; a group
// across hosts from the allocator, as the ordinary zeros a real job's tcp groups get.
std::unique_ptr<Communicator> make_dry_communicator(int rank, int size, std::shared_ptr<DryLog> log,
                                                    std::shared_ptr<DryMailbox> mailbox, bool wait_for_messages,
                                                    int ranks_per_host = 0);

}  // namespace tessera::dist
