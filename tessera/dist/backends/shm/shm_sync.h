// ShmSync: the flags an shm group synchronises on. Each rank owns one monotonically increasing
// counter in the shared segment (the rounds it has arrived at, shm_communicator.h); it publishes
// its own and waits for the peers'. A wait spins briefly, then sleeps on a
// shared futex (no FUTEX_PRIVATE_FLAG: the peers are other processes) in bounded slices, checking
// the deadline (TimeoutError naming the ranks not yet there) and, after each idle slice, whether
// the peers' processes still exist (PeerFailureError naming the one that is gone).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/dist/types.h"

namespace tessera::dist::detail {

// One flag on its own 128 bytes: the adjacent-line prefetcher pulls pairs of 64-byte lines, and a
// flag sharing them with another rank's flag would bounce between the cores on every publish.
struct alignas(128) ShmCounter {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};  // waiters in futex_wait on `value`; publish wakes only if > 0
  // When `value` was last published to a sleeping waiter (CLOCK_MONOTONIC, the same in every
  // process): the waiter learns from it how long spinning would have had to last (ShmSync::wait_one).
  std::atomic<int64_t> published_ns{0};
  // Set once by a rank that left the group (ShmSync::leave): waits for it end at once.
  std::atomic<uint32_t> departed{0};
};

// The futex and liveness primitives ShmSync waits with, shared with point-to-point
// (shm_point_to_point.h): a shared futex (no FUTEX_PRIVATE_FLAG: the peers are other processes).
void shm_futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);
void shm_futex_wake_all(std::atomic<uint32_t>* word);
// Whether `pid` runs (a zombie, exited but not reaped, does not).
bool shm_process_alive(pid_t pid);

class ShmSync {
 public:
  // `counters` points at `size` counters in the segment; `pids[r]` is rank r's process.
  ShmSync(ShmCounter* counters, int rank, int size, std::vector<pid_t> pids);

  // Sets this rank's counter to `value` and wakes the peers sleeping on it.
  void publish(uint32_t value);
  // Returns once rank p's counter has reached `value` (wrap-around safe) for every peer p, or only
  // for `only_peer` when it is >= 0. `op` names the collective in errors ("allreduce").
  void wait(uint32_t value, const char* op, Deadline deadline, int only_peer = -1);
  // Called before each of a wait's sleeps (point-to-point progress, so that a send posted before a
  // collective still completes while the collective waits).
  void set_idle_hook(std::function<void()> hook) { idle_hook_ = std::move(hook); }
  // Every wait, now and later, throws Error within one sleep slice (20 ms). Thread-safe.
  void abort() { aborted_.store(true, std::memory_order_relaxed); }
  // abort(), and the peers' waits for this rank end within one slice too (PeerFailureError): this
  // rank has left the group for good (a live job's survivor, live_membership.h).
  void leave();

 private:
  void wait_one(int peer, uint32_t value, const char* op, Deadline deadline, int only_peer);
  [[noreturn]] void throw_timeout(uint32_t value, const char* op, int only_peer);
  void check_aborted(int peer, const char* op) const;
  void check_alive(int peer, const char* op);

  ShmCounter* counters_;
  int rank_;
  int size_;
  std::vector<pid_t> pids_;
  int64_t max_spin_ns_;  // spinning before sleeping, at most; see the constructor for the measurement
  int64_t spin_ns_;      // the current budget, adapted after every wait
  bool yield_first_ = false;  // more ranks than cores: yield before sleeping (wait_one)
  std::function<void()> idle_hook_;
  std::atomic<bool> aborted_{false};
};

}  // namespace tessera::dist::detail
