// Preflight: before step 1, measure every link between the job's hosts, print the table, and name
// a link that is much slower than the others (a bad cable, a misconfigured port, a shaped or shared
// link) before it shows up as a straggler hours into training. `tessera doctor` (run under `tessera
// run`) and `tessera run --preflight` call it.
//
// One rank per host (the lowest) stands for its host; every pair of hosts is measured in turn while
// the others wait at a barrier: latency from round trips of a 4 KiB message (ping-pong), and bandwidth
// as `bytes` sent one way, timed until the receiver's 1-element acknowledgement (best of `repeats`). On
// one host, every pair of ranks is measured instead (the shared-memory or loopback path).
//
// Verdicts use what noise cannot improve: the best bandwidth and the quickest round trip (a descheduled
// process only ever makes a trip slower, so a median on a busy machine can double while the link is
// fine; CI saw exactly that). A link is named for latency only when its quickest trip is also
// `min_round_trip_gap_us` above the best link's: 40 us against 90 us is no reason to stop a job.
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
  double min_round_trip_gap_us = 200.0;
};

struct LinkMeasure {
  int rank_a = 0, rank_b = 0;
  std::string host_a, host_b;
  double round_trip_us = 0.0;      // 4 KiB, median
  double min_round_trip_us = 0.0;  // 4 KiB, quickest
  double gbytes_per_s = 0.0;   // one way, best
};

struct PreflightReport {
  std::vector<LinkMeasure> links;
  std::vector<std::string> slow;  // one line per slow link, naming its hosts and by how much
  std::string table() const;      // the links, then the slow ones (or "no link is slower ...")
};

// The verdicts on measured links (above); one line per slow link. Needs two links or more.
std::vector<std::string> slow_links(const std::vector<LinkMeasure>& links, const PreflightOptions& options = {});

// Collective over `group`; every rank returns the same report.
PreflightReport run_preflight(ProcessGroup& group, const PreflightOptions& options = {});

}  // namespace tessera::dist
