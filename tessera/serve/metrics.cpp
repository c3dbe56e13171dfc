#include "tessera/serve/metrics.h"

#include <algorithm>
#include <cstdio>

namespace tessera::serve {

namespace {
std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::vector<double> powers_of_two_up_to(int64_t max_batch) {
  std::vector<double> b;
  for (int64_t v = 1; v < max_batch; v *= 2) b.push_back(static_cast<double>(v));
  b.push_back(static_cast<double>(std::max<int64_t>(max_batch, 1)));
  return b;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}
}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1) {}

void Histogram::observe(double value) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[i];
  sum_ += value;
  ++total_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + braces + " " + number(sum_) + "\n";
  out += name + "_count" + braces + " " + std::to_string(total_) + "\n";
}

ServeMetrics::ServeMetrics(int64_t max_batch)
    : latency_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}),
      batch_sizes_(powers_of_two_up_to(max_batch)) {}

void ServeMetrics::request_done(const std::string& route, int status, double seconds) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_[{route, status}];
  }
  if (status >= 500) server_errors_.fetch_add(1);
  else if (status >= 400) client_errors_.fetch_add(1);
  if (route == "/v1/predict") latency_.observe(seconds);
}

void ServeMetrics::batch_done(int64_t samples) {
  batch_sizes_.observe(static_cast<double>(samples));
  samples_.fetch_add(static_cast<uint64_t>(samples));
}

std::string ServeMetrics::prometheus_text(const std::string& extra) const {
  std::string out;
  header(out, "tessera_serve_requests_total", "counter", "Requests answered, by route and HTTP status code.");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, n] : requests_)
      out += "tessera_serve_requests_total{route=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"} " +
             std::to_string(n) + "\n";
  }
  header(out, "tessera_serve_errors_total", "counter", "Requests answered with an error: 4xx (client) or 5xx (server).");
  out += "tessera_serve_errors_total{kind=\"client\"} " + std::to_string(client_errors_.load()) + "\n";
  out += "tessera_serve_errors_total{kind=\"server\"} " + std::to_string(server_errors_.load()) + "\n";
  header(out, "tessera_serve_in_flight", "gauge", "Predict requests being answered now.");
  out += "tessera_serve_in_flight " + std::to_string(in_flight_.load()) + "\n";
  header(out, "tessera_serve_request_duration_seconds", "histogram", "Time to answer a predict request.");
  latency_.write(out, "tessera_serve_request_duration_seconds");
  header(out, "tessera_serve_samples_total", "counter", "Samples the model ran on in this process.");
  out += "tessera_serve_samples_total " + std::to_string(samples_.load()) + "\n";
  header(out, "tessera_serve_batch_size", "histogram", "Samples per model run (dynamic batching).");
  batch_sizes_.write(out, "tessera_serve_batch_size");
  header(out, "tessera_serve_replica_restarts_total", "counter", "Replica processes that died and were started again.");
  out += "tessera_serve_replica_restarts_total " + std::to_string(restarts_.load()) + "\n";
  return out + extra;
}

}  // namespace tessera::serve
