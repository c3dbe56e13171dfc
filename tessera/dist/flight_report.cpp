#include "tessera/dist/flight_report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"

namespace tessera::dist {

namespace {

using nlohmann::json;
using tessera::detail::concat;

std::string seconds(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(us) / 1e6);
  return buf;
}

}  // namespace

std::string flight_call_of(const json& entry) {
  std::string d = entry.value("description", "");
  const size_t hash = d.find(" #");
  if (hash == std::string::npos) return d;
  const size_t end = d.find(' ', hash + 2);
  return d.substr(0, hash) + (end == std::string::npos ? "" : d.substr(end));
}

std::vector<json> read_flight_records(const std::string& dir) {
  namespace fs = std::filesystem;
  TESSERA_CHECK(fs::is_directory(dir), "[trace analyze] ", dir, " is not a directory of flight records");
  std::vector<json> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || e.path().extension() != ".json") continue;
    json j = json::parse(io::read_file(e.path().string()), nullptr, false);
    if (j.is_object() && j.value("format", "") == "tessera flight record 1" && j.contains("entries")) out.push_back(std::move(j));
  }
  TESSERA_CHECK(!out.empty(), "[trace analyze] ", dir, " holds no flight records (rank-*.json)");
  return out;
}

std::string analyze_flight_records(const std::vector<json>& records) {
  std::map<std::string, std::vector<const json*>> groups;
  for (const auto& r : records) groups[r.value("group", "?")].push_back(&r);
  std::string report;
  for (auto& [name, members] : groups) {
    const int size = members.front()->value("size", 0);
    const std::vector<int> global = members.front()->value("global_ranks", std::vector<int>{});
    std::map<int, const json*> by_rank;
    for (const json* m : members) by_rank[m->value("rank", -1)] = m;
    // The newest collective any rank reached (queued), and the newest dump time (the "now").
    uint64_t frontier = 0;
    bool any = false;
    int64_t now = 0;
    for (const auto& [rank, m] : by_rank) {
      now = std::max(now, m->value("dumped_us", int64_t{0}));
      for (const auto& e : (*m)["entries"]) {
        frontier = std::max(frontier, e.value("sequence", uint64_t{0}));
        any = true;
      }
    }
    auto who = [&](int rank) {
      const int g = rank >= 0 && rank < static_cast<int>(global.size()) ? global[static_cast<size_t>(rank)] : rank;
      std::string s = g == rank ? concat("rank ", rank) : concat("rank ", rank, " (global ", g, ")");
      if (auto it = by_rank.find(rank); it != by_rank.end()) s += " on " + it->second->value("host", "?");
      return s;
    };
    report += concat("group ", name, " (", size, " ranks, ", by_rank.size(), " records):\n");
    if (!any) {
      report += "  no collective recorded\n";
      continue;
    }
    // Desynchronisation: the same number filled with different calls.
    // Each call with the ranks that made it and where in their code (file:line, when recorded).
    std::map<uint64_t, std::map<std::string, std::vector<std::pair<int, std::string>>>> calls;
    for (const auto& [rank, m] : by_rank)
      for (const auto& e : (*m)["entries"])
        calls[e.value("sequence", uint64_t{0})][flight_call_of(e)].emplace_back(rank, e.value("call_site", ""));
    for (const auto& [sequence, variants] : calls) {
      if (variants.size() < 2) continue;
      report += concat("  DESYNC at collective #", sequence, ": the ranks called different collectives:\n");
      for (const auto& [call, ranks] : variants) {
        std::string list;
        for (const auto& [r, site] : ranks) list += (list.empty() ? "" : ", ") + who(r) + (site.empty() ? "" : " at " + site);
        report += concat("    ", call, ": ", list, "\n");
      }
      break;  // the first one is where the job went wrong
    }
    // Who waits in the frontier collective, who never reached it.
    std::string waiting, missing, frontier_call;
    int done = 0;
    for (int rank = 0; rank < size; ++rank) {
      auto it = by_rank.find(rank);
      if (it == by_rank.end()) {
        missing += concat("    ", who(rank), ": no flight record (dead, stopped, or never stuck long enough to write one)\n");
        continue;
      }
      const json* reached = nullptr;
      const json* last = nullptr;
      for (const auto& e : (*it->second)["entries"]) {
        if (e.value("sequence", uint64_t{0}) == frontier) reached = &e;
        last = &e;
      }
      if (reached != nullptr) {
        frontier_call = reached->value("description", "");
        const std::string state = reached->value("state", "");
        if (state == "done") ++done;
        else if (state == "failed")
          waiting += concat("    ", who(rank), ": failed in it: ", reached->value("error", "").substr(0, 300), "\n");
        else
          waiting += concat("    ", who(rank), ": ", state == "running" ? "waiting in it" : "queued it", " for ",
                            seconds(now - reached->value(state == "running" ? "started_us" : "queued_us", now)), "\n");
      } else {
        missing += concat("    ", who(rank), ": never reached it; its last collective is ",
                          last ? last->value("description", "") + " (" + last->value("state", "") + ")" : "none", "\n");
      }
    }
    if (missing.empty() && waiting.empty()) {
      report += concat("  every rank finished collective #", frontier, " (", frontier_call, "): nothing is stuck\n");
      continue;
    }
    report += concat("  ", frontier_call.empty() ? concat("collective #", frontier) : frontier_call, ":\n", waiting);
    if (!missing.empty()) report += concat("  MISSING from it:\n", missing);
    if (done > 0) report += concat("  ", done, " rank(s) finished it\n");
  }
  return report;
}

}  // namespace tessera::dist
