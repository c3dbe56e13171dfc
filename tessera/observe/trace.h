// The timeline of a run (`[observability] trace = true`, `tessera train --trace`): spans of what each
// thread did (step, data, forward, backward, optimizer, evaluation, checkpoint; each collective on the
// process group's thread), written per rank as Chrome's trace event format (JSON Object Format: a
// "traceEvents" array of complete events, ph "X", with ts and dur in microseconds), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open. `tessera trace merge DIR` puts every rank's file on
// one timeline, a process per rank.
//
// Tracing is off unless enabled: a span then costs one relaxed atomic load. On, a span is two clock
// reads and, at its end, a push onto a vector under a mutex; at most kMaxEvents are kept (the count of
// the ones dropped is written too).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::observe {

struct TraceEvent {
  std::string name;
  std::string category;  // "train", "comm", ...
  int64_t start_us = 0;  // microseconds since the Unix epoch: ranks on one clock line up
  int64_t duration_us = 0;
  int thread = 0;        // this process's thread number (trace_thread_id)
};

constexpr size_t kMaxEvents = 1 << 20;

void enable_tracing(bool on);
bool tracing_enabled();

// A small number per thread, in the order threads first ask; and a name for it in the timeline.
int trace_thread_id();
void name_trace_thread(std::string_view name);

// Records [construction, destruction) as one event when tracing is on.
class TraceSpan {
 public:
  TraceSpan(std::string_view name, std::string_view category);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  bool on_;
  TraceEvent event_;
  int64_t steady_start_ns_ = 0;
};

// The events recorded so far (and forgets them), the thread names, and how many were dropped.
struct TraceBuffer {
  std::vector<TraceEvent> events;
  std::vector<std::pair<int, std::string>> thread_names;
  int64_t dropped = 0;
};
TraceBuffer take_trace();

// The Chrome trace JSON of one process (pid = rank, named "rank R").
std::string chrome_trace_json(const TraceBuffer& buffer, int rank);
// Writes it atomically to `path`.
void write_chrome_trace(const std::string& path, const TraceBuffer& buffer, int rank);
// One timeline of several ranks' files: their traceEvents concatenated (each keeps its pid), sorted
// by time. ValueError naming a file that is not a trace.
std::string merge_chrome_traces(const std::vector<std::string>& paths);

}  // namespace tessera::observe
