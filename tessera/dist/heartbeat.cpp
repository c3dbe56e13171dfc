#include "tessera/dist/heartbeat.h"

#include <sstream>

namespace tessera::dist {

std::string group_store_prefix(int index) { return "pg" + std::to_string(index); }
std::string heartbeat_key(int rank) { return "heartbeat/" + std::to_string(rank); }
std::string worker_heartbeat_key(int rank) { return group_store_prefix(0) + "/" + heartbeat_key(rank); }

std::string format_heartbeat(const Heartbeat& b) {
  std::ostringstream out;
  out << b.count << ' ' << b.busy_us << ' ' << (b.in_flight ? 1 : 0) << ' ' << b.sequence << ' '
      << (b.op.empty() ? "idle" : b.op) << '\n' << (b.in_flight ? b.call : std::string()) << '\n';
  for (const auto& [sequence, us] : b.arrivals) out << sequence << ':' << us << ' ';
  return out.str();
}

std::optional<Heartbeat> parse_heartbeat(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string fields, arrivals;
  Heartbeat b;
  std::getline(in, fields);
  std::getline(in, b.call);
  std::getline(in, arrivals);
  std::istringstream f(fields);
  int flight = 0;
  if (!(f >> b.count >> b.busy_us >> flight >> b.sequence >> b.op)) return std::nullopt;
  if (flight != 0 && flight != 1) return std::nullopt;
  b.in_flight = flight != 0;
  if (b.call.empty() && b.in_flight) b.call = b.op + " #" + std::to_string(b.sequence);
  std::istringstream a(arrivals);
  for (std::string item; a >> item;) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) return std::nullopt;
    try {
      size_t used = 0;
      const int64_t sequence = std::stoll(item.substr(0, colon), &used);
      if (used != colon) return std::nullopt;
      const std::string when = item.substr(colon + 1);
      const int64_t us = std::stoll(when, &used);
      if (used != when.size()) return std::nullopt;
      b.arrivals[sequence] = us;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return b;
}

}  // namespace tessera::dist
