// The process group's watchdog and failure reports: the thread that publishes heartbeats
// (dist/heartbeat.h) and stuck collectives to the store, and the report a failed collective carries
// (which ranks never arrived, on which host, and where they were last seen).
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/heartbeat.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist {

using tessera::detail::concat;

namespace {

// How often a stuck collective is reported to the store, and how long a failing rank waits for
// the others' reports: a quarter of the timeout, within [20 ms, 1 s].
Milliseconds watchdog_interval(Milliseconds timeout) {
  return std::clamp(timeout / 4, Milliseconds(20), Milliseconds(1000));
}

}  // namespace

// ---- failure reports ------------------------------------------------------------------------

std::string ProcessGroup::this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "an unnamed host";
  return name;
}

void ProcessGroup::run_watchdog() {
  // Polls; publishes "progress/<rank>" = "<seq> <op>" once for a collective seen in flight at two
  // consecutive polls, i.e. stuck for at least one interval. Nothing is sent while collectives
  // complete within the interval.
  const Milliseconds interval = watchdog_interval(options_.timeout);
  const bool beating = options_.heartbeat > Milliseconds(0);
  const Milliseconds wake = beating ? std::min(interval, options_.heartbeat) : interval;
  auto next_check = std::chrono::steady_clock::now() + interval;
  // The collective check (process_group_check.cpp): every interval, at least 250 ms apart.
  const Milliseconds check_period = std::max(interval, Milliseconds(250));
  auto next_fingerprint_check = std::chrono::steady_clock::now() + check_period;
  std::unique_lock lock(mu_);
  uint64_t seen = UINT64_MAX, published = UINT64_MAX;
  uint64_t beats = 0;
  bool first = true;  // the first heartbeat goes out at once
  while (!stopping_) {
    if (!first) watchdog_cv_.wait_for(lock, wake, [&] { return stopping_; });
    if (stopping_) return;
    if (beating) {
      Heartbeat beat;
      beat.count = static_cast<int64_t>(++beats);
      beat.busy_us = static_cast<int64_t>(busy_ns_.load() / 1000);
      beat.in_flight = in_flight_call_ != nullptr;
      beat.sequence = static_cast<int64_t>(beat.in_flight ? in_flight_sequence_ : next_sequence_.load());
      beat.op = beat.in_flight ? in_flight_call_->op : std::string("idle");
      beat.call = beat.in_flight ? in_flight_call_->description(in_flight_sequence_) : std::string();  // op, sequence, dtype, size
      for (const auto& [sequence, us] : arrivals_) beat.arrivals[static_cast<int64_t>(sequence)] = us;
      const std::string value = format_heartbeat(beat);
      lock.unlock();
      try {
        if (options_.heartbeat_store)
          options_.heartbeat_store->set(heartbeat_key(options_.heartbeat_rank), value);
        else
          store_->set(heartbeat_key(rank_), value);
      } catch (const std::exception&) {
        // Best-effort: a dead store is the agent's to notice.
      }
      lock.lock();
      if (stopping_) return;
    }
    if (first) {
      first = false;
      continue;
    }
    if (std::chrono::steady_clock::now() >= next_fingerprint_check) {
      next_fingerprint_check = std::chrono::steady_clock::now() + check_period;
      check_fingerprints(lock);
      if (stopping_) return;
    }
    if (std::chrono::steady_clock::now() < next_check) continue;
    next_check = std::chrono::steady_clock::now() + interval;
    if (!in_flight_call_) {
      seen = UINT64_MAX;
      continue;
    }
    uint64_t sequence = in_flight_sequence_;
    if (sequence == seen && sequence != published) {
      std::string value = concat(sequence, " ", in_flight_call_->op);
      const std::string stuck = concat("stuck in ", in_flight_call_->description(sequence), " for over ", interval.count(), " ms");
      published = sequence;
      lock.unlock();
      try {
        store_->set(concat("progress/", rank_), value);
      } catch (const std::exception&) {
        // The report is best-effort; the collective's own timeout still fires.
      }
      dump_flight_record(stuck);  // what `tessera trace analyze` reads, long before the timeout
      lock.lock();
    }
    seen = sequence;
  }
}

std::string ProcessGroup::describe_stragglers(const Task& task) {
  // Every rank stuck in this collective publishes within two watchdog intervals of getting stuck;
  // wait that long (bounded) for the reports, then name the ranks that never showed up.
  const Milliseconds interval = watchdog_interval(options_.timeout);
  std::vector<std::string> last_seen(static_cast<size_t>(size_));
  std::vector<bool> arrived(static_cast<size_t>(size_), false);
  arrived[static_cast<size_t>(rank_)] = true;
  try {
    store_->set(concat("progress/", rank_), concat(task.sequence, " ", task.call->op));
    Deadline until = detail::deadline_after(options_.wait_for_failure_reports ? 3 * interval : Milliseconds(0));
    for (;;) {
      bool all = true;
      for (int r = 0; r < size_; ++r) {
        if (arrived[static_cast<size_t>(r)]) continue;
        std::string key = concat("progress/", r);
        if (store_->check({key})) {
          std::string value = store_->get_string(key);
          last_seen[static_cast<size_t>(r)] = value;
          if (std::stoull(value) >= task.sequence) arrived[static_cast<size_t>(r)] = true;
        }
        all = all && arrived[static_cast<size_t>(r)];
      }
      if (all || detail::Clock::now() >= until) break;
      // Diagnostics after a failure, not synchronisation: a short poll of the store.
      std::this_thread::sleep_for(Milliseconds(20));
    }
  } catch (const std::exception& e) {
    // Neither the peers nor the store answer: this host is cut off from the others.
    return concat("; this rank (on ", this_host(), ") cannot reach the store either, so this host is cut off from the "
                  "job's network (a link down or a partition?): ", e.what());
  }
  std::string missing;
  for (int r = 0; r < size_; ++r) {
    if (arrived[static_cast<size_t>(r)]) continue;
    int global = global_ranks_[static_cast<size_t>(r)];
    std::string who = global == r ? concat("rank ", r) : concat("rank ", r, " (global rank ", global, ")");
    try {
      if (std::string key = concat("host/", r); store_->check({key})) who += concat(" on ", store_->get_string(key));
    } catch (const std::exception&) {
    }
    const std::string& seen = last_seen[static_cast<size_t>(r)];
    std::string where = seen.empty() ? "no report: dead, stopped, or busy outside any collective"
                                     : concat("last seen stuck in #", seen);
    missing += concat(missing.empty() ? "" : ", ", who, " [", where, "]");
  }
  if (missing.empty()) return concat("; every rank reached #", task.sequence, " (a backend or network failure)");
  return concat("; rank(s) that never arrived at #", task.sequence, ": ", missing);
}

}  // namespace tessera::dist
