// `tessera report RUN_DIR`: one self-contained HTML page (inline SVG, no script) of what a run did,
// from its metrics.jsonl: loss and accuracy against steps and time, throughput, communication time
// and the share of it hidden behind backward, memory by category (ZeRO), and the run's starts and
// resumptions (an elastic job's recoveries), and, for a run traced with --trace, one step of every
// rank on a timeline. Open it in any browser, offline.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::observe {

struct RunRecords {
  std::vector<nlohmann::json> records;  // metrics.jsonl in order
  std::vector<std::string> skipped;     // "line N: why", for lines that are not a JSON object
};

// IoError naming the file when it cannot be read; a line that does not parse (a run killed while
// writing it) is skipped and listed.
RunRecords read_metrics(const std::string& metrics_path);

// `trace_events`: the traceEvents of the run's timeline (trace.h), when it was traced: the page then
// shows one step of every rank as lanes.
std::string report_html(const RunRecords& run, const std::string& title,
                        const nlohmann::json& trace_events = nlohmann::json::array());

// Writes <run_dir>/report.html (or `output`) atomically; returns its path. ValueError when the run
// directory holds no metrics.jsonl.
std::string write_run_report(const std::string& run_dir, const std::string& output = "");

}  // namespace tessera::observe
