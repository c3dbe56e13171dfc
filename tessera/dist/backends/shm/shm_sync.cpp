#include "tessera/dist/backends/shm/shm_sync.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/util/settings.h"

namespace tessera::dist::detail {

using tessera::detail::concat;

namespace {

// Counters only grow, but a long job wraps 32 bits; compare as a signed distance.
bool reached(uint32_t current, uint32_t target) { return static_cast<int32_t>(current - target) >= 0; }

// The longest a sleeping waiter goes without looking at its deadline and at the peers' liveness:
// a dead peer is reported within about this long.
constexpr auto kSlice = std::chrono::milliseconds(20);

// The adaptive spin (see the constructor) never drops below this (about 32 pauses), so that it can
// notice when the peers run alongside again.
constexpr int64_t kMinSpinNs = 400;

// With more ranks than cores, a wait yields its core up to this often, for at most this long,
// before it sleeps.
constexpr int kMaxYields = 64;
constexpr int64_t kYieldNs = 200000;

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void shm_futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // EAGAIN (the value changed), EINTR and ETIMEDOUT all just send the caller back to its checks.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void shm_futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// kill(pid, 0) still succeeds for a zombie (exited, not yet reaped by its parent), which is what a
// crashed rank is until the launcher reaps it; /proc tells the two apart.
bool shm_process_alive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::string path = concat("/proc/", pid, "/stat");
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return true;  // no /proc: trust kill()
  char buffer[512];
  size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, f);
  std::fclose(f);
  buffer[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')', since comm may itself contain one.
  std::string text(buffer);
  size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return true;
  char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

ShmSync::ShmSync(ShmCounter* counters, int rank, int size, std::vector<pid_t> pids)
    : counters_(counters), rank_(rank), size_(size), pids_(std::move(pids)) {
  // Spinning only pays while the peer runs on another core at the same time: a peer that is not
  // running cannot publish, and our spinning may be what keeps it off the core. Measured on this
  // 2-core machine while others were compiling (2 processes, 4 KiB allreduce): sleeping at once
  // 6 us per call, spinning up to 46 us first 111 us; 16 MiB: 4.7 ms vs 5.7 ms. With a core per
  // rank and nothing else running, spinning wins instead (it saves the futex round trip), so the
  // budget adapts. After a wait that spinning satisfied it doubles. After one that slept, the
  // publisher's timestamp says when the peer came: if within the most we may spin, the budget
  // becomes twice that gap (the next such wait spins and wins), else it halves. (The first version
  // only halved after a sleep: once the peers ran apart for a while, the budget sank to its floor,
  // shorter than any real gap, and never grew again: the 4 KiB all-reduce then took 100-150 us
  // instead of 7 us, in runs chosen by chance.) TESSERA_SHM_SPIN sets the most pauses per wait
  // (of about 11.5 ns here; 0: always sleep at once).
  // The machine's cores, not this process's affinity mask: the launcher binds each rank to a core
  // of its own (launcher/worker_process.h), so a rank's mask says nothing of whether its peers have
  // cores too. Ranks confined together to fewer cores (taskset over the whole job) are not seen
  // as oversubscribed here; they still sleep once a spin is seen not to pay.
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int64_t max_pauses = static_cast<unsigned>(size) <= cores ? 4000 : 64;
  max_pauses = env_int("TESSERA_SHM_SPIN", max_pauses);
  max_spin_ns_ = max_pauses * 23 / 2;
  yield_first_ = static_cast<unsigned>(size) > cores;
  spin_ns_ = std::min<int64_t>(max_spin_ns_, 3000);
}

void ShmSync::publish(uint32_t value) {
  ShmCounter& c = counters_[rank_];
  // seq_cst on both sides (this store and the waiter's sleepers increment) makes the pair a
  // Dekker handshake: either we see the sleeper and wake it, or its futex_wait sees the new value.
  c.value.store(value, std::memory_order_seq_cst);
  if (c.sleepers.load(std::memory_order_seq_cst) != 0) {
    // Only a waiter that slept reads the time (wait_one), and it reads it after this wake-up; a
    // clock read on every publish cost 24 ns of a 4 KiB all-reduce's 1 us.
    c.published_ns.store(monotonic_ns(), std::memory_order_relaxed);
    shm_futex_wake_all(&c.value);
  }
}

void ShmSync::wait(uint32_t value, const char* op, Deadline deadline, int only_peer) {
  if (only_peer >= 0) {
    if (only_peer != rank_) wait_one(only_peer, value, op, deadline, only_peer);
    return;
  }
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) wait_one(p, value, op, deadline, only_peer);
  }
}

void ShmSync::wait_one(int peer, uint32_t value, const char* op, Deadline deadline, int only_peer) {
  ShmCounter& c = counters_[peer];
  if (reached(c.value.load(std::memory_order_acquire), value)) return;
  // Spin, reading the clock (~24 ns) once per 16 pauses. The first 16 come before any clock read,
  // which the budget then counts from: a peer running alongside usually arrives within a few
  // hundred ns. (No spinning at all when told never to spin.)
  int64_t start = -1;
  while (spin_ns_ > 0) {
    for (int i = 0; i < 16; ++i) {
      _mm_pause();
      if (reached(c.value.load(std::memory_order_acquire), value)) {
        spin_ns_ = std::min(max_spin_ns_, std::max(2 * spin_ns_, kMinSpinNs));
        return;
      }
    }
    const int64_t now = monotonic_ns();
    if (start < 0) start = now;
    else if (now - start >= spin_ns_) break;
  }
  if (start < 0) start = monotonic_ns();
  if (yield_first_) {
    // More ranks than cores: the peer we wait for may be runnable but without a core, and
    // sched_yield hands it ours at once, where a futex sleep costs a wake-up through the scheduler
    // (Open MPI's shared-memory transport polls with sched_yield when oversubscribed, too).
    const int64_t yield_start = monotonic_ns();
    for (int i = 0; i < kMaxYields && monotonic_ns() - yield_start < kYieldNs; ++i) {
      sched_yield();
      if (reached(c.value.load(std::memory_order_acquire), value)) return;
    }
  }
  // Called once the wait is satisfied after sleeping: how long the peer took decides the budget.
  // The peer stamps its publish only when it sees a sleeper; a stamp older than this wait means it
  // published while we were not registered as one: after the spin ended, or after a sleep slice
  // ran out (or between its store and its stamp). The start of that window is then the gap's best
  // estimate: the time since also holds the idle hook's work and any time we were descheduled,
  // which are not the peer's lateness.
  int64_t unregistered_since = monotonic_ns();
  auto adapt_after_sleep = [&] {
    const int64_t stamped = c.published_ns.load(std::memory_order_relaxed);
    const int64_t gap = stamped >= start ? stamped - start : unregistered_since - start;
    spin_ns_ = gap < max_spin_ns_ ? std::min(max_spin_ns_, std::max(2 * gap, kMinSpinNs))
                                  : std::max(std::min(kMinSpinNs, max_spin_ns_), spin_ns_ / 2);
  };
  for (;;) {
    uint32_t seen = c.value.load(std::memory_order_acquire);
    if (reached(seen, value)) return adapt_after_sleep();
    check_aborted(peer, op);
    auto now = Clock::now();
    if (now >= deadline) throw_timeout(value, op, only_peer);
    auto slice = std::min<std::chrono::nanoseconds>(deadline - now, kSlice);
    if (idle_hook_) {
      idle_hook_();
      if (reached(c.value.load(std::memory_order_acquire), value)) return adapt_after_sleep();
    }
    c.sleepers.fetch_add(1, std::memory_order_seq_cst);
    shm_futex_wait(&c.value, seen, slice);
    c.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(c.value.load(std::memory_order_acquire), value)) return adapt_after_sleep();
    unregistered_since = monotonic_ns();
    // Only after a slice without progress: a syscall and a /proc read per wakeup would cost more
    // than the wait itself when ranks outnumber cores and sleep every round.
    if (Clock::now() - now >= kSlice) check_alive(peer, op);
  }
}

void ShmSync::leave() {
  abort();
  ShmCounter& mine = counters_[rank_];
  mine.departed.store(1, std::memory_order_release);
  shm_futex_wake_all(&mine.value);  // a peer asleep on this rank's counter looks again
}

void ShmSync::check_aborted(int peer, const char* op) const {
  if (counters_[peer].departed.load(std::memory_order_acquire) != 0)
    throw PeerFailureError(concat("[shm ", op, "] rank ", rank_, " of ", size_, ": peer rank ", peer,
                                  " left the group (its process group failed)"));
  if (!aborted_.load(std::memory_order_relaxed)) return;
  throw Error(concat("[shm ", op, "] rank ", rank_, " of ", size_, ": aborted while waiting for rank ", peer,
                     " (the process group failed)"));
}

void ShmSync::check_alive(int peer, const char* op) {
  pid_t pid = pids_[static_cast<size_t>(peer)];
  if (pid == getpid() || shm_process_alive(pid)) return;
  throw PeerFailureError(concat("[shm ", op, "] rank ", rank_, " of ", size_, ": peer rank ", peer, " (pid ", pid,
                                ") has exited"));
}

void ShmSync::throw_timeout(uint32_t value, const char* op, int only_peer) {
  std::string missing;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || (only_peer >= 0 && p != only_peer)) continue;
    if (reached(counters_[p].value.load(std::memory_order_acquire), value)) continue;
    missing += concat(missing.empty() ? "" : ", ", p);
  }
  throw TimeoutError(concat("[shm ", op, "] rank ", rank_, " of ", size_, " timed out waiting for rank(s) ", missing,
                            " to arrive (round ", value - 1, ")"));
}

}  // namespace tessera::dist::detail
