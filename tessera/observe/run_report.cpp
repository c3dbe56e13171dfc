#include "tessera/observe/run_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/observe/svg_chart.h"

namespace tessera::observe {

namespace {

using nlohmann::json;

constexpr const char* kBlue = "#1f77b4";
constexpr const char* kOrange = "#ff7f0e";
constexpr const char* kGreen = "#2ca02c";
constexpr const char* kRed = "#d62728";
constexpr const char* kPurple = "#9467bd";
constexpr const char* kGrey = "#7f7f7f";

std::string num(double v, const char* format = "%.4g") {
  if (!std::isfinite(v)) return "–";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

bool is(const json& r, const char* type) { return r.value("type", "") == type; }

double number(const json& r, const char* key) {
  auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// (step, value) of every record of `type` that has `key`.
std::vector<std::pair<double, double>> by_step(const std::vector<json>& records, const char* type, const char* key) {
  std::vector<std::pair<double, double>> out;
  for (const auto& r : records)
    if (is(r, type) && std::isfinite(number(r, key))) out.emplace_back(number(r, "step"), number(r, key));
  return out;
}

// An exponential moving average, for a readable line through a noisy one.
std::vector<std::pair<double, double>> smoothed(std::vector<std::pair<double, double>> points, double alpha) {
  double ema = std::nan("");
  for (auto& [x, y] : points) y = ema = std::isfinite(ema) ? alpha * y + (1 - alpha) * ema : y;
  return points;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Every rank's spans from <run_dir>/trace (the merged timeline.json, else the rank-*.json files).
json trace_events_of(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(run_dir) / "trace";
  json events = json::array();
  if (!fs::is_directory(dir)) return events;
  std::vector<fs::path> files;
  if (fs::exists(dir / "timeline.json")) files.push_back(dir / "timeline.json");
  else
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind("rank-", 0) == 0) files.push_back(e.path());
  for (const auto& f : files) {
    json t = json::parse(io::read_file(f.string()), nullptr, false);
    if (t.is_object() && t.contains("traceEvents") && t["traceEvents"].is_array())
      for (auto& e : t["traceEvents"]) events.push_back(std::move(e));
  }
  return events;
}

// One training step of every rank as lanes of spans (a lane per rank and thread): what a DDP step
// did, where its all-reduces ran and where the ranks waited.
std::string timeline_svg(const json& events) {
  std::vector<const json*> steps;
  std::map<std::pair<int, int>, std::string> lane_names;
  for (const auto& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name")
      lane_names[{e.value("pid", 0), e.value("tid", 0)}] = e["args"].value("name", "");
    if (e.value("ph", "") == "X" && e.value("pid", -1) == 0 && e.value("name", "").rfind("step ", 0) == 0) steps.push_back(&e);
  }
  if (steps.empty()) return "";
  // The step of median duration: a typical one, not the first of an epoch (after evaluation) or a slow one.
  std::sort(steps.begin(), steps.end(), [](const json* a, const json* b) { return (*a)["dur"] < (*b)["dur"]; });
  const json& step = *steps[steps.size() / 2];
  const double s0 = step["ts"].get<double>(), dur = std::max(step["dur"].get<double>(), 1.0);
  const double w0 = s0 - 0.15 * dur, w1 = s0 + 1.3 * dur;
  std::map<std::pair<int, int>, std::vector<const json*>> lanes;
  for (const auto& e : events) {
    if (e.value("ph", "") != "X") continue;
    const double a = e["ts"].get<double>(), b = a + e["dur"].get<double>();
    if (b >= w0 && a <= w1) lanes[{e.value("pid", 0), e.value("tid", 0)}].push_back(&e);
  }
  const double left = 210, width = 760, lane_h = 26, top = 34;
  const double height = top + lane_h * static_cast<double>(lanes.size()) + 40;
  auto sx = [&](double t) { return left + (t - w0) / (w1 - w0) * (width - left - 10); };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart timeline\" font-family=\"sans-serif\" width=\"" + num(width, "%.0f") +
                    "\" height=\"" + num(height, "%.0f") + "\" role=\"img\" aria-label=\"Timeline\">\n"
                    "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n<text x=\"10\" y=\"20\" font-size=\"14\" "
                    "font-weight=\"bold\">Timeline of " + escape_xml(step.value("name", "")) + " on every rank (" +
                    num(dur / 1000, "%.3g") + " ms on rank 0)</text>\n";
  auto color = [](const json& e) -> std::string {
    const std::string n = e.value("name", "");
    if (e.value("cat", "") == "comm") return n.rfind("allreduce", 0) == 0 ? "#d62728" : "#ff9896";
    if (e.value("cat", "") == "bubble") return "#e0e0e0";  // a pipeline stage waiting for its neighbour
    if (n == "forward" || n.rfind("forward micro-batch", 0) == 0) return "#1f77b4";
    if (n == "backward" || n.rfind("backward micro-batch", 0) == 0) return "#ff7f0e";
    if (n == "optimizer") return "#2ca02c";
    if (n == "data") return "#7f7f7f";
    if (n == "evaluate" || n == "checkpoint") return "#9467bd";
    return "#dbe9f6";
  };
  double y = top;
  for (auto& [key, spans] : lanes) {
    std::string name = "rank " + std::to_string(key.first) + " " + lane_names[key];
    svg += "<text x=\"8\" y=\"" + num(y + 17, "%.1f") + "\" font-size=\"11\" fill=\"#333\">" + escape_xml(name) + "</text>\n";
    for (const json* e : spans) {
      const bool outer = e->value("name", "").rfind("step ", 0) == 0;
      const double a = std::max(sx((*e)["ts"].get<double>()), left);
      const double b = std::min(sx((*e)["ts"].get<double>() + (*e)["dur"].get<double>()), width - 10);
      svg += "<rect class=\"span\" x=\"" + num(a, "%.1f") + "\" y=\"" + num(outer ? y + 2 : y + 7, "%.1f") +
             "\" width=\"" + num(std::max(b - a, 0.8), "%.1f") + "\" height=\"" + num(outer ? 4 : lane_h - 10, "%.1f") +
             "\" fill=\"" + color(*e) + "\"><title>" + escape_xml(e->value("name", "")) + " " +
             num((*e)["dur"].get<double>() / 1000, "%.3g") + " ms</title></rect>\n";
    }
    y += lane_h;
  }
  double lx = left;
  for (const auto& [label, c] : std::vector<std::pair<std::string, std::string>>{
           {"forward", "#1f77b4"}, {"backward", "#ff7f0e"}, {"optimizer", "#2ca02c"}, {"data", "#7f7f7f"},
           {"all-reduce", "#d62728"}, {"other collective", "#ff9896"}}) {
    svg += "<rect x=\"" + num(lx, "%.1f") + "\" y=\"" + num(y + 12, "%.1f") + "\" width=\"10\" height=\"10\" fill=\"" + c +
           "\"/><text x=\"" + num(lx + 14, "%.1f") + "\" y=\"" + num(y + 21, "%.1f") + "\" font-size=\"11\">" + label + "</text>\n";
    lx += 24 + 7.0 * static_cast<double>(label.size());
  }
  return svg + "</svg>\n";
}

}  // namespace

RunRecords read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("[report] cannot read " + path);
  RunRecords run;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) run.skipped.push_back("line " + std::to_string(n) + ": not a JSON object");
    else run.records.push_back(std::move(j));
  }
  return run;
}

std::string report_html(const RunRecords& run, const std::string& title, const nlohmann::json& trace_events) {
  const auto& rs = run.records;
  // Time: seconds since the first record that carries a clock (steps written by tessera train do).
  double t0 = std::nan("");
  for (const auto& r : rs)
    if (std::isfinite(number(r, "unix_time"))) {
      t0 = number(r, "unix_time");
      break;
    }
  std::vector<std::pair<double, double>> loss_by_time;
  std::vector<double> rates, comm, exposed;
  int64_t last_step = 0, epochs = 0, starts = 0, resumes = 0;
  double last_time = std::nan(""), last_step_seen = -1;
  double final_accuracy = std::nan(""), final_eval_loss = std::nan(""), final_loss = std::nan("");
  int64_t redone_steps = 0;
  std::string events;
  for (const auto& r : rs) {
    const double step = number(r, "step");
    if (is(r, "step")) {
      if (std::isfinite(step) && step <= last_step_seen) redone_steps += static_cast<int64_t>(last_step_seen - step + 1);
      last_step_seen = std::isfinite(step) ? step : last_step_seen;
      last_step = std::max<int64_t>(last_step, static_cast<int64_t>(step));
      final_loss = number(r, "loss");
      if (std::isfinite(number(r, "samples_per_s"))) rates.push_back(number(r, "samples_per_s"));
      if (std::isfinite(number(r, "comm_ms"))) comm.push_back(number(r, "comm_ms"));
      if (std::isfinite(number(r, "exposed_comm_ms"))) exposed.push_back(number(r, "exposed_comm_ms"));
      const double t = number(r, "unix_time");
      if (std::isfinite(t)) {
        loss_by_time.emplace_back(t - t0, number(r, "loss"));
        last_time = t;
      }
    } else if (is(r, "epoch")) {
      ++epochs;
      final_accuracy = number(r, "eval_accuracy");
      final_eval_loss = number(r, "eval_loss");
    } else if (is(r, "start")) {
      ++starts;
      const bool resumed = r.value("resumed", false);
      resumes += resumed ? 1 : 0;
      const double t = number(r, "unix_time");
      events += "<tr><td>" + num(std::isfinite(t) && std::isfinite(t0) ? t - t0 : std::nan(""), "%.1f") + "</td><td>" +
                num(step, "%.0f") + "</td><td>" + (resumed ? "resumed" : "started") + "</td><td>" +
                num(number(r, "world_size"), "%.0f") + "</td></tr>\n";
    }
  }
  double comm_sum = 0, exposed_sum = 0;
  for (double v : comm) comm_sum += v;
  for (double v : exposed) exposed_sum += v;

  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape_xml(title) +
                     "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:800px}"
                     "table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:4px 10px;"
                     "text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}"
                     "svg.chart{display:block;margin:12px 0 24px;border:1px solid #eee}</style></head><body>\n";
  html += "<h1>" + escape_xml(title) + "</h1>\n<table>\n";
  auto row = [&](const std::string& k, const std::string& v) { html += "<tr><th>" + k + "</th><td>" + v + "</td></tr>\n"; };
  row("steps", std::to_string(last_step));
  row("epochs completed", std::to_string(epochs));
  row("last training loss", num(final_loss));
  if (std::isfinite(final_accuracy)) row("test accuracy (last epoch)", num(100 * final_accuracy, "%.2f%%"));
  if (std::isfinite(final_eval_loss)) row("test loss (last epoch)", num(final_eval_loss));
  row("samples/s (median of steps)", num(median(rates), "%.0f"));
  if (std::isfinite(last_time)) row("wall time", num(last_time - t0, "%.3g s"));
  if (!comm.empty()) {
    row("gradient communication per step (median)", num(median(comm), "%.3g ms"));
    row("of it hidden behind backward", comm_sum > 0 ? num(100 * (1 - exposed_sum / comm_sum), "%.1f%%") : "–");
  }
  if (starts > 0) row("starts / of them resumptions", std::to_string(starts) + " / " + std::to_string(resumes));
  if (redone_steps > 0) row("steps done again after a resumption", std::to_string(redone_steps));
  html += "</table>\n";

  Chart loss{"Loss", "step", "loss"};
  auto train_loss = by_step(rs, "step", "loss");
  loss.series.push_back({"training (per step)", "#aec7e8", train_loss, false, 1});
  // About the last 20 steps weigh in the smoothed line, however long the run.
  const double alpha = std::clamp(20.0 / static_cast<double>(std::max<size_t>(train_loss.size(), 1)), 0.02, 1.0);
  loss.series.push_back({"training (smoothed)", kBlue, smoothed(train_loss, alpha), false, 2});
  loss.series.push_back({"test (per epoch)", kOrange, by_step(rs, "epoch", "eval_loss"), true});
  html += render_svg(loss);
  if (const auto accuracy = by_step(rs, "epoch", "eval_accuracy"); !accuracy.empty()) {
    Chart acc{"Test accuracy", "step", "accuracy"};
    acc.series.push_back({"test accuracy", kGreen, accuracy, false, 2});
    acc.series.push_back({"per epoch", kGreen, accuracy, true});
    html += render_svg(acc);
  }
  if (!loss_by_time.empty()) {
    Chart lt{"Loss against time", "seconds since the first step", "loss"};
    lt.series.push_back({"training (smoothed)", kBlue, smoothed(loss_by_time, alpha), false, 2});
    html += render_svg(lt);
  }
  Chart tp{"Throughput", "step", "samples/s"};
  tp.y_from_zero = true;
  tp.series.push_back({"samples/s (smoothed over steps)", kPurple, by_step(rs, "step", "samples_per_s"), false, 1.5});
  html += render_svg(tp);
  if (!comm.empty()) {
    Chart cm{"Gradient communication per step", "step", "ms"};
    cm.y_from_zero = true;
    cm.series.push_back({"all of it", kOrange, by_step(rs, "step", "comm_ms"), false, 1});
    cm.series.push_back({"not hidden by backward", kRed, by_step(rs, "step", "exposed_comm_ms"), false, 1});
    html += render_svg(cm);
  }
  if (const auto balance = by_step(rs, "step", "moe_load_max_over_mean"); !balance.empty()) {
    // A mixture of experts' routing: each expert's share of the choices; the busiest against an
    // even share, and the choices dropped for capacity.
    Chart moe{"Mixture of experts: the router's load", "step", "share of the choices"};
    moe.y_from_zero = true;
    const char* palette[] = {kBlue, kOrange, kGreen, kPurple, kGrey};
    const size_t experts = rs.empty() ? 0 : [&] {
      for (const auto& r : rs)
        if (r.contains("moe_expert_load") && r["moe_expert_load"].is_array()) return r["moe_expert_load"].size();
      return size_t{0};
    }();
    for (size_t e = 0; e < experts && e < 16; ++e) {
      std::vector<std::pair<double, double>> points;
      for (const auto& r : rs)
        if (is(r, "step") && r.contains("moe_expert_load") && r["moe_expert_load"].is_array() &&
            r["moe_expert_load"].size() > e && r["moe_expert_load"][e].is_number())
          points.emplace_back(number(r, "step"), r["moe_expert_load"][e].get<double>());
      moe.series.push_back({"expert " + std::to_string(e), palette[e % std::size(palette)], points, false, 1});
    }
    moe.series.push_back({"dropped", kRed, by_step(rs, "step", "moe_dropped_fraction"), false, 1.5});
    html += render_svg(moe);
    Chart skew{"Mixture of experts: the busiest expert against an even share", "step", "ratio (1: even)"};
    skew.series.push_back({"worst layer", kPurple, balance, false, 1.5});
    html += render_svg(skew);
  }
  const std::pair<const char*, const char*> memory[] = {{"zero_parameter_bytes", "parameters"},
                                                        {"zero_gradient_bytes", "gradients"},
                                                        {"zero_optimizer_state_bytes", "optimizer state"},
                                                        {"zero_activation_peak_bytes", "activations (peak)"},
                                                        {"peak_allocated_bytes", "peak allocated"}};
  Chart mem{"Memory of rank 0 by category", "step", "MiB"};
  mem.y_from_zero = true;
  const char* colors[] = {kBlue, kOrange, kGreen, kRed, kGrey};
  for (size_t i = 0; i < std::size(memory); ++i) {
    auto points = by_step(rs, "step", memory[i].first);
    for (auto& p : points) p.second /= 1024.0 * 1024.0;
    if (!points.empty()) mem.series.push_back({memory[i].second, colors[i], points, false, 1.5});
  }
  if (!mem.series.empty()) html += render_svg(mem);
  if (trace_events.is_array() && !trace_events.empty()) html += timeline_svg(trace_events);
  if (!events.empty())
    html += "<h2>Starts and resumptions</h2>\n<table><tr><th>seconds</th><th>step</th><th>event</th><th>processes</th></tr>\n" +
            events + "</table>\n";
  if (!run.skipped.empty()) {
    html += "<h2>Lines left out</h2>\n<ul>\n";
    for (const auto& s : run.skipped) html += "<li>" + escape_xml(s) + "</li>\n";
    html += "</ul>\n";
  }
  return html + "</body></html>\n";
}

std::string write_run_report(const std::string& run_dir, const std::string& output) {
  namespace fs = std::filesystem;
  const fs::path metrics = fs::path(run_dir) / "metrics.jsonl";
  TESSERA_CHECK(fs::exists(metrics), "[report] ", run_dir, " holds no metrics.jsonl: give the train.output_dir of a run");
  const RunRecords run = read_metrics(metrics.string());
  const std::string path = output.empty() ? (fs::path(run_dir) / "report.html").string() : output;
  io::write_file_atomic(path, report_html(run, "tessera run " + run_dir, trace_events_of(run_dir)));
  return path;
}

}  // namespace tessera::observe
