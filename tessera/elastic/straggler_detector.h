// StragglerDetector: names a rank the others keep waiting for, from when each rank issued each
// collective (the arrivals its heartbeat carries, dist/heartbeat.h). The elastic agent of node 0
// feeds it one window at a time.
//
// In a window, for every collective every rank has issued since the last window, a rank's lag is how
// long after the first arrival it came: the others wait that long. The rank with the largest total
// lag earns a strike when that lag is over three times the next largest and over 5% of the window
// (it kept the others waiting that much); any other outcome clears its strikes. Three strikes in a
// row name it. (A rank slow between collectives is late at the first one after the delay; the ones
// after it start together, so one slow step is one late arrival, not a streak.)
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera::elastic {

struct StragglerReport {
  int rank = 0;
  std::string text;  // "straggler: rank 1 is consistently late at the collectives: ..."
};

class StragglerDetector {
 public:
  explicit StragglerDetector(std::chrono::milliseconds window) : window_(window) {}

  // A new generation: new ranks, new sequence numbers.
  void reset();
  // One window's arrivals, per rank: collective sequence -> Unix microseconds. Returns the report
  // when a rank completes three strikes in a row (once per streak).
  std::optional<StragglerReport> observe(const std::vector<std::map<int64_t, int64_t>>& arrivals);

 private:
  std::chrono::milliseconds window_;
  int64_t seen_sequence_ = -1;  // collectives up to here were counted in an earlier window
  std::map<int, int> strikes_;
};

}  // namespace tessera::elastic
