// The other agents' heartbeats, as one agent sees them in the rendezvous (rendezvous.h): an agent
// whose count has not moved for the heartbeat timeout is gone (its machine died or was cut off),
// and node 0 waits at the end of a job until every other agent has finished or gone.
#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "tessera/elastic/rendezvous.h"

namespace tessera::elastic {

class AgentHeartbeats {
 public:
  explicit AgentHeartbeats(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // The report of another member of `m` that sent no heartbeat for the timeout and has not finished;
  // nullopt while all beat.
  std::optional<std::string> silent_agent(Rendezvous& rdzv, const Membership& m);

  // Blocks, polling every `interval`, until every other member of `m` has finished or gone silent.
  void wait_until_finished_or_gone(Rendezvous& rdzv, const Membership& m, std::chrono::milliseconds interval);

 private:
  // member -> (last count seen, when it changed)
  using Seen = std::map<int, std::pair<int64_t, std::chrono::steady_clock::time_point>>;
  // How long member j has been silent, after recording its count now.
  std::chrono::steady_clock::duration silence(Seen& seen, Rendezvous& rdzv, const Membership& m, int j);

  std::chrono::milliseconds timeout_;
  Seen seen_;
};

}  // namespace tessera::elastic
