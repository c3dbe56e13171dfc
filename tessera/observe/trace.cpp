#include "tessera/observe/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/util/clock.h"

namespace tessera::observe {

namespace {

std::atomic<bool> enabled{false};
std::atomic<int> next_thread{0};

struct Recorder {
  std::mutex mutex;
  TraceBuffer buffer;
};
Recorder& recorder() {
  static Recorder* r = new Recorder();  // never destroyed: spans may end in threads outliving main
  return *r;
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void enable_tracing(bool on) { enabled.store(on, std::memory_order_relaxed); }
bool tracing_enabled() { return enabled.load(std::memory_order_relaxed); }

int trace_thread_id() {
  thread_local int id = next_thread.fetch_add(1);
  return id;
}

void name_trace_thread(std::string_view name) {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int id = trace_thread_id();
  for (auto& [tid, n] : r.buffer.thread_names)
    if (tid == id) {
      n = std::string(name);
      return;
    }
  r.buffer.thread_names.emplace_back(id, std::string(name));
}

TraceSpan::TraceSpan(std::string_view name, std::string_view category) : on_(tracing_enabled()) {
  if (!on_) return;
  event_.name = std::string(name);
  event_.category = std::string(category);
  event_.thread = trace_thread_id();
  event_.start_us = unix_micros();
  steady_start_ns_ = steady_ns();
}

TraceSpan::~TraceSpan() {
  if (!on_) return;
  event_.duration_us = (steady_ns() - steady_start_ns_) / 1000;
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.buffer.events.size() < kMaxEvents) r.buffer.events.push_back(std::move(event_));
  else ++r.buffer.dropped;
}

TraceBuffer take_trace() {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  TraceBuffer out;
  out.events.swap(r.buffer.events);
  out.thread_names = r.buffer.thread_names;  // names stay: the threads do
  out.dropped = r.buffer.dropped;
  r.buffer.dropped = 0;
  return out;
}

std::string chrome_trace_json(const TraceBuffer& buffer, int rank) {
  using nlohmann::json;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}});
  for (const auto& [tid, name] : buffer.thread_names)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", tid}, {"args", {{"name", name}}}});
  for (const auto& e : buffer.events)
    events.push_back({{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", e.start_us}, {"dur", e.duration_us},
                      {"pid", rank}, {"tid", e.thread}});
  json trace{{"traceEvents", events}, {"displayTimeUnit", "ms"},
             {"otherData", {{"producer", "tessera"}, {"rank", rank}, {"dropped_events", buffer.dropped}}}};
  return trace.dump(-1, ' ', false, json::error_handler_t::replace);
}

void write_chrome_trace(const std::string& path, const TraceBuffer& buffer, int rank) {
  io::write_file_atomic(path, chrome_trace_json(buffer, rank));
}

std::string merge_chrome_traces(const std::vector<std::string>& paths) {
  using nlohmann::json;
  TESSERA_CHECK(!paths.empty(), "[trace] no trace files to merge");
  json metadata = json::array(), spans = json::array();
  for (const auto& path : paths) {
    json t = json::parse(io::read_file(path), nullptr, false);
    TESSERA_CHECK(!t.is_discarded() && t.is_object() && t.contains("traceEvents") && t["traceEvents"].is_array(), "[trace] ",
                  path, " is not a Chrome trace (a JSON object with a traceEvents array)");
    for (auto& e : t["traceEvents"]) (e.value("ph", "") == "M" ? metadata : spans).push_back(std::move(e));
  }
  std::vector<json> sorted(spans.begin(), spans.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const json& a, const json& b) { return a.value("ts", int64_t{0}) < b.value("ts", int64_t{0}); });
  for (auto& e : sorted) metadata.push_back(std::move(e));
  return json{{"traceEvents", metadata}, {"displayTimeUnit", "ms"}, {"otherData", {{"producer", "tessera trace merge"}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::observe
