// The elastic rendezvous: agents (one `tessera run` per machine) agree, generation after
// generation, on who is in the job and in which order. Everything lives under
// <run_id>/ in a RendezvousStore:
//
//   gen                   the current generation g (absent: 0)
//   g<g>/count            agents that joined round g (each takes the next number i = 1, 2, ...)
//   g<g>/member/<i>       "<agent id> <slots> <host>" of the i-th to join
//   g<g>/closed           n, the members of generation g: the first n to join. Set once (compare_set)
//                         by whichever agent first sees count >= max, or count >= min and either
//                         count >= g<g>/expected or count unchanged for last_call
//   g<g>/expected         how many agents the previous generation's end expects back
//   g<g>/waiting          agents that came after the round closed and wait for the next one
//   g<g>/beat/<r>         the heartbeat counter of the member of node rank r (i - 1)
//   g<g>/finished/<r>     node r's workers all exited 0
//   g<g>/end              why generation g ended: "<kind> <unix ms> <text>", kind failure | grow |
//                         lost; set once, then gen = g + 1 (a late agent finishes that second write
//                         when the ender died between the two)
//   g<g>/last_step        the step rank 0 had reached when g ended, or "none" when it never
//                         started (for the recovery report)
//   done, failed          the job finished / gave up (a late agent then exits instead of waiting)
//
// Node ranks are join order; a member's workers take the global ranks after those of the members
// before it, so nodes may have different numbers of workers (slots).
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/elastic/rendezvous_store.h"

namespace tessera::elastic {

using Milliseconds = std::chrono::milliseconds;

struct RendezvousOptions {
  std::string run_id = "default";
  int min_nodes = 1, max_nodes = 1;
  Milliseconds last_call{1000};      // a round with >= min agents closes once no one joined for this long
  Milliseconds join_timeout{60000};  // a round that cannot close (< min agents) fails after this
  // A generation none of whose members beats for this long is over (as the agents' watch decides),
  // and a wait in the rendezvous that passes it is reported once on log_fd.
  Milliseconds heartbeat_timeout{10000};
  int log_fd = -1;  // the agent's stderr; -1: waits are not reported
  Milliseconds poll{50};
};

struct Member {
  std::string id;
  int slots = 0;
  std::string host;
};

struct Membership {
  int64_t generation = 0;
  int node_rank = 0;  // this agent's index in members
  std::vector<Member> members;
  int world_size() const;
  int first_rank() const;  // the global rank of this agent's first worker
};

// How a generation ended (g<g>/end).
struct GenerationEnd {
  std::string kind;  // failure | grow | lost
  int64_t unix_ms = 0;
  std::string text;
};

int64_t unix_ms_now();

class Rendezvous {
 public:
  Rendezvous(RendezvousStore& store, RendezvousOptions options, std::string agent_id);

  // Joins the current round and returns its membership once it closes with this agent in it; an
  // agent that came too late waits for the next generation and joins that. nullopt when the job
  // finished or failed meanwhile. TimeoutError when no round closes within join_timeout.
  std::optional<Membership> join(int slots, const std::string& host);

  int64_t generation();
  // Ends generation g (if no one else has): records why and how many agents the next round should
  // expect, then bumps gen. Returns false when another agent ended it first.
  bool end_generation(int64_t g, const std::string& kind, const std::string& text, int expected_next);
  std::optional<GenerationEnd> end_of(int64_t g);

  void beat(const Membership& m);  // this member's heartbeat
  int64_t beat_of(int64_t g, int member);  // member's counter (0 before its first beat)
  void mark_finished(const Membership& m);
  bool finished(int64_t g, int member);
  int64_t waiting(int64_t g);

  void set(const std::string& key, const std::string& value) { store_.set(key_(key), value); }
  std::optional<std::string> get(const std::string& key) { return store_.get(key_(key)); }
  // Waits (polling, at most join_timeout) for `key`; nullopt when generation g ended first.
  std::optional<std::string> wait_in_generation(int64_t g, const std::string& key);

  RendezvousStore& store() { return store_; }
  const RendezvousOptions& options() const { return options_; }

 private:
  std::string key_(const std::string& key) const { return options_.run_id + "/" + key; }
  std::string gkey(int64_t g, const std::string& key) const {
    return key_("g" + std::to_string(g) + "/" + key);
  }
  std::optional<int64_t> get_int(const std::string& full_key);
  bool job_over();
  // The wait of an agent too late for generation g (of `members` agents) for g + 1. False: the job
  // is over. Ends in at most about heartbeat_timeout once g's members are gone (see the .cpp).
  bool wait_for_next(int64_t g, int64_t members);
  // Reports "<what> for <seconds>" once (`said`), when a wait begun at `since` passes heartbeat_timeout.
  void note_wait(std::chrono::steady_clock::time_point since, bool& said, const std::string& what);

  RendezvousStore& store_;
  RendezvousOptions options_;
  std::string agent_id_;
};

}  // namespace tessera::elastic
