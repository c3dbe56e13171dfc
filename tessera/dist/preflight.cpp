#include "tessera/dist/preflight.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>

#include "tessera/core/error.h"
#include "tessera/util/task_progress.h"
#include "tessera/ops/ops.h"

namespace tessera::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kHostNameLength = 64;

// Every rank's hostname, gathered as 64 int64 "characters" each.
std::vector<std::string> gather_hosts(ProcessGroup& group) {
  char name[kHostNameLength] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::vector<int64_t> mine(kHostNameLength, 0);
  for (int64_t i = 0; i < kHostNameLength && name[i] != '\0'; ++i) mine[static_cast<size_t>(i)] = name[i];
  Tensor out = zeros({group.size() * kHostNameLength}, DType::Int64);
  group.allgather(from_vector(mine, {kHostNameLength}), out)->wait();
  std::vector<std::string> hosts(static_cast<size_t>(group.size()));
  const int64_t* d = out.data<int64_t>();
  for (int r = 0; r < group.size(); ++r)
    for (int64_t i = 0; i < kHostNameLength && d[r * kHostNameLength + i] != 0; ++i)
      hosts[static_cast<size_t>(r)].push_back(static_cast<char>(d[r * kHostNameLength + i]));
  return hosts;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct PairFigures {
  double median_trip_us, quickest_trip_us, gbytes_per_s;
};

// Rank a and rank b measure their link; the figures of the measurer (a) count.
PairFigures measure_pair(ProcessGroup& group, int a, int b, const PreflightOptions& o) {
  const bool is_a = group.rank() == a;
  const int peer = is_a ? b : a;
  // a sends `out` and receives `back`; b receives `out` and sends `back`. The seconds it took.
  auto exchange = [&](const Tensor& out, const Tensor& back) {
    const auto t0 = Clock::now();
    if (is_a) {
      group.send(out, peer, 1)->wait();
      group.recv(back, peer, 2)->wait();
    } else {
      group.recv(out, peer, 1)->wait();
      group.send(back, peer, 2)->wait();
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  Tensor small = zeros({1024});  // 4 KiB each way
  std::vector<double> trips;
  for (int i = 0; i < o.round_trips + 3; ++i) {
    const double seconds = exchange(small, small);
    if (i >= 3) trips.push_back(seconds * 1e6);  // after 3 warm-ups
  }
  Tensor big = zeros({std::max<int64_t>(1, o.bytes / 4)}), ack = zeros({1});
  double best = 0.0;
  for (int i = 0; i < o.repeats; ++i)
    best = std::max(best, static_cast<double>(big.numel() * 4) / exchange(big, ack) / 1e9);
  return {median(trips), *std::min_element(trips.begin(), trips.end()), best};
}

}  // namespace

std::vector<std::string> slow_links(const std::vector<LinkMeasure>& links, const PreflightOptions& o) {
  std::vector<std::string> slow;
  if (links.size() < 2) return slow;
  // Against the best link: with one slow host, most of its links are slow, and a median would be too.
  double rate = 0.0, trip = 1e300;
  for (const auto& l : links) rate = std::max(rate, l.gbytes_per_s), trip = std::min(trip, l.min_round_trip_us);
  for (const auto& l : links) {
    char line[256];
    if (l.gbytes_per_s * o.slow_factor < rate)
      std::snprintf(line, sizeof line, "slow link: %s (rank %d) <-> %s (rank %d) carries %.3f GB/s, %.1fx below the best link's %.3f GB/s",
                    l.host_a.c_str(), l.rank_a, l.host_b.c_str(), l.rank_b, l.gbytes_per_s, rate / l.gbytes_per_s, rate);
    else if (l.min_round_trip_us > o.slow_factor * trip && l.min_round_trip_us - trip > o.min_round_trip_gap_us)
      std::snprintf(line, sizeof line, "slow link: %s (rank %d) <-> %s (rank %d) takes at least %.0f us per 4 KiB round trip, %.1fx the best link's %.0f us",
                    l.host_a.c_str(), l.rank_a, l.host_b.c_str(), l.rank_b, l.min_round_trip_us, l.min_round_trip_us / trip, trip);
    else
      continue;
    slow.push_back(line);
  }
  return slow;
}

PreflightReport run_preflight(ProcessGroup& group, const PreflightOptions& o) {
  TESSERA_CHECK(o.bytes >= 4 && o.round_trips >= 1 && o.repeats >= 1, "[preflight] bytes, round trips and repeats must be positive");
  const std::vector<std::string> hosts = gather_hosts(group);
  // One rank per host stands for it (the lowest); on one host, every rank does.
  std::map<std::string, int> first_of;
  for (int r = 0; r < group.size(); ++r) first_of.try_emplace(hosts[static_cast<size_t>(r)], r);
  std::vector<int> members;
  if (first_of.size() > 1) {
    for (const auto& [host, r] : first_of) members.push_back(r);
    std::sort(members.begin(), members.end());
  } else {
    for (int r = 0; r < group.size(); ++r) members.push_back(r);
  }
  PreflightReport report;
  std::optional<TaskProgress> progress;  // rank 0 shows how many links are measured
  if (group.rank() == 0) progress.emplace("preflight: links measured", static_cast<int64_t>(members.size() * (members.size() - 1) / 2));
  for (size_t i = 0; i < members.size(); ++i)
    for (size_t j = i + 1; j < members.size(); ++j) {
      const int a = members[i], b = members[j];
      LinkMeasure link{a, b, hosts[static_cast<size_t>(a)], hosts[static_cast<size_t>(b)]};
      PairFigures measured{0.0, 0.0, 0.0};
      if (group.rank() == a || group.rank() == b) measured = measure_pair(group, a, b, o);
      // a's figures to everyone (b's are the same link seen from the other end).
      Tensor figures = from_vector(std::vector<float>{static_cast<float>(measured.median_trip_us), static_cast<float>(measured.quickest_trip_us),
                                                      static_cast<float>(measured.gbytes_per_s)},
                                   {3});
      group.blocking_broadcast(figures, a);
      link.round_trip_us = figures.data<float>()[0];
      link.min_round_trip_us = figures.data<float>()[1];
      link.gbytes_per_s = figures.data<float>()[2];
      report.links.push_back(link);
      if (progress) progress->advance();
    }
  progress.reset();
  report.slow = slow_links(report.links, o);
  return report;
}

std::string PreflightReport::table() const {
  std::string out = "preflight: " + std::to_string(links.size()) + " link(s)\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-24s %-24s %23s %12s\n", "from", "to", "4 KiB rtt us min/median", "GB/s");
  out += line;
  for (const auto& l : links) {
    const std::string a = l.host_a + " (" + std::to_string(l.rank_a) + ")", b = l.host_b + " (" + std::to_string(l.rank_b) + ")";
    std::snprintf(line, sizeof line, "  %-24s %-24s %10.1f /%11.1f %12.3f\n", a.c_str(), b.c_str(), l.min_round_trip_us, l.round_trip_us,
                  l.gbytes_per_s);
    out += line;
  }
  if (slow.empty()) out += "no link is more than 2x slower than the others\n";
  for (const auto& s : slow) out += s + "\n";
  return out;
}

}  // namespace tessera::dist
