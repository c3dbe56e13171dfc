// The process group's flight record (flight_recorder.h): the JSON it writes, where, and the registry
// SIGUSR2 reaches every live group through.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "tessera/core/error.h"
#include "tessera/dist/process_group.h"
#include "tessera/io/atomic_file.h"

namespace tessera::dist {

using tessera::detail::concat;

namespace {

std::mutex& registry_mutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::set<const ProcessGroup*>& registry() {
  static auto* groups = new std::set<const ProcessGroup*>();
  return *groups;
}

}  // namespace

// The same on every member: its size, first and last global rank, and a hash of all of them and of
// the lineage (which tells apart groups of the same ranks).
std::string flight_group_name(const std::vector<int>& global_ranks, const std::string& lineage) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int r : global_ranks) {
    h ^= static_cast<uint64_t>(r) + 1;
    h *= 1099511628211ull;
  }
  for (char c : lineage) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08llx", static_cast<unsigned long long>(h & 0xffffffffull));
  return concat("g", global_ranks.size(), "-", global_ranks.front(), "to", global_ranks.back(), "-", hex);
}

void register_flight_group(const ProcessGroup* group) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().insert(group);
}

void unregister_flight_group(const ProcessGroup* group) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(group);
}

nlohmann::json ProcessGroup::flight_record(const std::string& reason) const {
  nlohmann::json j{{"format", "tessera flight record 1"},
                   {"reason", reason},
                   {"group", name_},
                   {"rank", rank_},
                   {"size", size_},
                   {"global_rank", global_ranks_[static_cast<size_t>(rank_)]},
                   {"global_ranks", global_ranks_},
                   {"backend", backend_name()},
                   {"host", this_host()},
                   {"pid", static_cast<int64_t>(::getpid())},
                   {"timeout_ms", options_.timeout.count()},
                   {"dumped_us", unix_micros()},
                   {"next_sequence", next_sequence_.load()},
                   {"entries", flight_.entries()}};
  return j;
}

void ProcessGroup::dump_flight_record(const std::string& reason) const {
  const std::string dir = flight_recorder_dir();
  if (dir.empty() || !options_.dump_flight_records) return;
  try {
    std::filesystem::create_directories(dir);
    const std::string path = concat(dir, "/rank-", global_ranks_[static_cast<size_t>(rank_)], "-",
                                    name_, ".json");
    io::write_file_atomic(path, flight_record(reason).dump(1, ' ', false, nlohmann::json::error_handler_t::replace));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[flight recorder] rank %d could not write its record to %s: %s\n", rank_, dir.c_str(), e.what());
  }
}

void ProcessGroup::dump_all_flight_records(const std::string& reason) {
  std::lock_guard<std::mutex> lock(registry_mutex());  // a group is not destroyed while it writes
  for (const ProcessGroup* g : registry()) g->dump_flight_record(reason);
}

std::vector<nlohmann::json> ProcessGroup::all_flight_records(const std::string& reason) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<nlohmann::json> records;
  for (const ProcessGroup* g : registry()) records.push_back(g->flight_record(reason));
  std::sort(records.begin(), records.end(),
            [](const nlohmann::json& a, const nlohmann::json& b) { return a.value("group", "") < b.value("group", ""); });
  return records;
}

}  // namespace tessera::dist
