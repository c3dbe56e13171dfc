// The heartbeat a worker's process group publishes and an elastic agent reads: the one contract
// between the two processes (written by dist/process_group_watchdog.cpp, parsed by
// elastic/worker_watch.cpp). Text, three lines:
//   "<count> <busy_us> <in_flight 0|1> <sequence> <op>"
//   the whole call in flight ("allreduce #30 (sum, float32 x 203530)"), empty when idle
//   "<sequence>:<unix us> ..." when this rank issued each of its latest collectives
// `count` grows by one per beat: a count that stops changing is a silent worker.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::dist {

struct Heartbeat {
  int64_t count = 0;
  int64_t busy_us = 0;  // time spent inside collectives so far
  bool in_flight = false;
  int64_t sequence = 0;  // of the collective in flight, or of the next one when idle
  std::string op = "idle";
  std::string call;  // the call in flight with its size; parse fills "<op> #<sequence>" when absent
  std::map<int64_t, int64_t> arrivals;  // sequence -> when this rank issued it (Unix us)
};

// The store prefix of the index-th process group dist::init_process_group creates in a job.
std::string group_store_prefix(int index);
// A rank's heartbeat key inside its group's (prefixed) store.
std::string heartbeat_key(int rank);
// The same key as the elastic agent reads it from the workers' store: under the first group's prefix.
std::string worker_heartbeat_key(int rank);

std::string format_heartbeat(const Heartbeat& beat);
// nullopt for text that is not a heartbeat (a peer's bytes are never trusted to be one).
std::optional<Heartbeat> parse_heartbeat(std::string_view text);

}  // namespace tessera::dist
