// Preflight: before step 1, measure every link between the job's hosts, print the table, and name
// a link that is much slower than the others (a bad cable, a misconfigured port, a shaped or shared
// link) before it shows up as a straggler hours into training. `tessera doctor` (run under `tessera
// run`) and `tessera run --preflight` call it.
//
// One rank per host (the lowest) stands for its host; every pair of hosts is measured in turn while
// the others wait at a barrier: latency as the median round trip of a 4 KiB message (ping-pong), and
// bandwidth as `bytes` sent one way, timed until the receiver's 1-element acknowledgement (best of
// `repeats`). On one host, every pair of ranks is measured instead (the shared-memory or loopback path).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"

namespace tessera::dist {

struct PreflightOptions {
  int64_t bytes = 8 << 20;   // one-way transfer for the bandwidth
  int round_trips = 20;      // 4 KiB ping-pongs for the latency (after 3 warm-ups)
  int repeats = 3;           // bandwidth transfers; the best counts
  double slow_factor = 2.0;  // a link this much worse than the best link is named
};

struct LinkMeasure {
  int rank_a = 0, rank_b = 0;
  std::string host_a, host_b;
  double round_trip_us = 0.0;  // 4 KiB, median
  double gbytes_per_s = 0.0;   // one way, best
};

struct PreflightReport {
  std::vector<LinkMeasure> links;
  std::vector<std::string> slow;  // one line per slow link, naming its hosts and by how much
  std::string table() const;      // the links, then the slow ones (or "no link is slower ...")
};

// Collective over `group`; every rank returns the same report.
PreflightReport run_preflight(ProcessGroup& group, const PreflightOptions& options = {});

}  // namespace tessera::dist
