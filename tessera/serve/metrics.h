// What `tessera serve` counts, written as Prometheus' text exposition format (version 0.0.4) for
// GET /metrics: requests by route and status code, errors, samples, requests in flight, the latency
// histogram, the batch-size histogram and replica restarts. Every method may be called from any
// thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tessera::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implied
  void observe(double value);
  // The _bucket (cumulative), _sum and _count lines of `name`, with `labels` ("" or `a="b"`).
  void write(std::string& out, const std::string& name, const std::string& labels = "") const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), the last for +Inf
  double sum_ = 0;
  uint64_t total_ = 0;
};

class ServeMetrics {
 public:
  explicit ServeMetrics(int64_t max_batch);
  void request_done(const std::string& route, int status, double seconds);
  void batch_done(int64_t samples);
  void replica_restarted() { restarts_.fetch_add(1); }
  std::atomic<int64_t>& in_flight() { return in_flight_; }
  // The whole exposition; `extra` (already formatted lines, e.g. the replicas' batch histograms) is
  // appended.
  std::string prometheus_text(const std::string& extra = "") const;
  const Histogram& batch_sizes() const { return batch_sizes_; }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram latency_, batch_sizes_;
  std::atomic<uint64_t> client_errors_{0}, server_errors_{0}, samples_{0}, restarts_{0};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace tessera::serve
