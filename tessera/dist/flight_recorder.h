// The flight recorder: each process group keeps its last collectives (op and sizes, sequence number,
// when each was queued, started and finished, how it ended) in a ring, and writes them as JSON when
// something goes wrong: a collective stuck past the watchdog's interval (a quarter of the timeout, at
// most 1 s), a collective that failed, or SIGUSR2 (train::run installs it). `tessera trace analyze DIR`
// (flight_report.h) reads every rank's file and says which rank is missing from which collective, or
// which ranks called different collectives as the same number, long before the timeout ends the job.
//
// Files go to flight_recorder_dir() (TESSERA_FLIGHT_DIR, else what the trainer sets: <output_dir>/
// flight), one per rank and group: rank-<global rank>-<group>.json, written atomically. No directory:
// nothing is written, the ring is still kept.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/dist/call_text.h"
#include "tessera/util/clock.h"

namespace tessera::dist {

struct FlightEntry {
  uint64_t sequence = 0;
  CallTextPtr call;  // op, signature (what the ranks must agree on), call site; shared, never null
  int64_t queued_us = 0, started_us = 0, finished_us = 0;  // Unix microseconds; 0: not yet
  std::string error;        // how it failed ("" when it did not, or has not ended)
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 512);
  // The times are Unix microseconds (unix_micros()), read by the caller, which needs them too.
  void queued(uint64_t sequence, CallTextPtr call, int64_t now_us);
  void started(uint64_t sequence, int64_t now_us);
  void finished(uint64_t sequence, int64_t now_us, const std::string& error = "");
  // The entries, oldest first, each with its state: "queued", "running", "done" or "failed".
  nlohmann::json entries() const;
  // The newest `count` entries, oldest first (the collective check's fingerprints).
  std::vector<FlightEntry> newest(size_t count) const;

 private:
  FlightEntry* find(uint64_t sequence);  // under mutex_
  mutable std::mutex mutex_;
  std::deque<FlightEntry> ring_;
  size_t capacity_;
};

// "" when no dumps are to be written.
std::string flight_recorder_dir();
// Used when TESSERA_FLIGHT_DIR is unset (the trainer: <output_dir>/flight).
void set_flight_recorder_dir(const std::string& dir);

// SIGUSR2 makes every live process group of this process write its record (reason "SIGUSR2"). A
// handler that only writes to a pipe, and a thread that does the rest. Idempotent.
void install_flight_recorder_signal();

}  // namespace tessera::dist
