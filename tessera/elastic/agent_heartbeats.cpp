#include "tessera/elastic/agent_heartbeats.h"

#include <thread>

#include "tessera/core/error.h"
#include "tessera/elastic/agent_log.h"

namespace tessera::elastic {

using Clock = std::chrono::steady_clock;
using tessera::detail::concat;

Clock::duration AgentHeartbeats::silence(Seen& seen, Rendezvous& rdzv, const Membership& m, int j) {
  const Clock::time_point now = Clock::now();
  const int64_t beat = rdzv.beat_of(m.generation, j);
  auto [it, fresh] = seen.try_emplace(j, std::make_pair(beat, now));
  if (fresh || it->second.first != beat) it->second = {beat, now};
  return now - it->second.second;
}

std::optional<std::string> AgentHeartbeats::silent_agent(Rendezvous& rdzv, const Membership& m) {
  for (int j = 0; j < static_cast<int>(m.members.size()); ++j) {
    if (j == m.node_rank) continue;
    const Clock::duration quiet = silence(seen_, rdzv, m, j);
    if (quiet > timeout_ && !rdzv.finished(m.generation, j))
      return concat("agent ", m.members[static_cast<size_t>(j)].id, " (node ", j, ") sent no heartbeat for ",
                    detail::seconds(quiet));
  }
  return std::nullopt;
}

void AgentHeartbeats::wait_until_finished_or_gone(Rendezvous& rdzv, const Membership& m, std::chrono::milliseconds interval) {
  Seen seen;  // its own: the generation's watch is over
  while (true) {
    bool all = true;
    for (int j = 0; j < static_cast<int>(m.members.size()); ++j) {
      if (j == m.node_rank || rdzv.finished(m.generation, j)) continue;
      if (silence(seen, rdzv, m, j) <= timeout_) all = false;  // alive and not done yet
    }
    if (all) return;
    std::this_thread::sleep_for(interval);  // a polling interval, not synchronisation
  }
}

}  // namespace tessera::elastic
