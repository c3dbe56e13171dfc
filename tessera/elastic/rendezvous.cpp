#include "tessera/elastic/rendezvous.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/elastic/agent_log.h"

namespace tessera::elastic {

namespace {
using Clock = std::chrono::steady_clock;
using tessera::detail::concat;  // elastic::detail (agent_log.h) hides tessera::detail
}  // namespace

int Membership::world_size() const {
  int n = 0;
  for (const Member& m : members) n += m.slots;
  return n;
}

int Membership::first_rank() const {
  int n = 0;
  for (int i = 0; i < node_rank; ++i) n += members[static_cast<size_t>(i)].slots;
  return n;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<Milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Rendezvous::Rendezvous(RendezvousStore& store, RendezvousOptions options, std::string agent_id)
    : store_(store), options_(std::move(options)), agent_id_(std::move(agent_id)) {
  TESSERA_CHECK(options_.min_nodes >= 1 && options_.min_nodes <= options_.max_nodes, "[rendezvous] --nnodes ",
                options_.min_nodes, ":", options_.max_nodes, " needs 1 <= MIN <= MAX");
  store_.compare_set(key_("gen"), "", "0");  // the first agent creates generation 0
}

std::optional<int64_t> Rendezvous::get_int(const std::string& full_key) {
  std::optional<std::string> v = store_.get(full_key);
  if (!v || v->empty()) return std::nullopt;
  return std::stoll(*v);
}

int64_t Rendezvous::generation() { return get_int(key_("gen")).value_or(0); }

bool Rendezvous::job_over() { return store_.get(key_("done")) || store_.get(key_("failed")); }

std::optional<Membership> Rendezvous::join(int slots, const std::string& host) {
  TESSERA_CHECK(slots >= 1, "[rendezvous] an agent needs at least one worker, got ", slots);
  while (true) {
    // join_timeout is per round: time spent as a too-late agent before it does not count against it.
    const Clock::time_point start = Clock::now();
    bool said = false;
    if (job_over()) return std::nullopt;
    const int64_t g = generation();
    const int64_t index = store_.add(gkey(g, "count"), 1);  // 1-based
    store_.set(gkey(g, "member/" + std::to_string(index)),
               agent_id_ + " " + std::to_string(slots) + " " + host);
    // Wait for the round to close; whoever first sees it closable closes it.
    std::optional<int64_t> closed;
    int64_t last_count = -1;
    Clock::time_point last_change = Clock::now();
    while (!(closed = get_int(gkey(g, "closed")))) {
      if (generation() != g || job_over()) break;
      const int64_t count = get_int(gkey(g, "count")).value_or(0);
      if (count != last_count) last_count = count, last_change = Clock::now();
      const std::optional<int64_t> expected = get_int(gkey(g, "expected"));
      const bool enough = count >= options_.min_nodes;
      if (count >= options_.max_nodes || (enough && expected && count >= *expected) ||
          (enough && Clock::now() - last_change >= options_.last_call)) {
        store_.compare_set(gkey(g, "closed"), "", std::to_string(std::min<int64_t>(count, options_.max_nodes)));
        continue;
      }
      if (Clock::now() - start > options_.join_timeout)
        throw TimeoutError(concat("[rendezvous] ", options_.run_id, ": only ", count, " of at least ",
                                          options_.min_nodes, " agents joined generation ", g, " within ",
                                          options_.join_timeout.count() / 1000.0, " s (", store_.describe(), ")"));
      note_wait(start, said, concat("waiting for generation ", g, " to close: ", count, " of at least ",
                                    options_.min_nodes, " agent(s) joined (", store_.describe(), ")"));
      std::this_thread::sleep_for(options_.poll);
    }
    if (!closed) continue;  // the round was abandoned: join the next
    if (index <= *closed) {
      Membership m;
      m.generation = g;
      m.node_rank = static_cast<int>(index - 1);
      for (int64_t i = 1; i <= *closed; ++i) {
        // A member sets its record right after taking its number; wait for it (bounded).
        std::optional<std::string> record;
        while (!(record = store_.get(gkey(g, "member/" + std::to_string(i))))) {
          TESSERA_CHECK(Clock::now() - start <= options_.join_timeout, "[rendezvous] member ", i, " of generation ",
                        g, " never wrote its record");
          note_wait(start, said, concat("waiting for member ", i, " of generation ", g, " to write its record"));
          std::this_thread::sleep_for(options_.poll);
        }
        std::istringstream in(*record);
        Member member;
        in >> member.id >> member.slots >> member.host;
        m.members.push_back(member);
      }
      return m;
    }
    // Too late for generation g: say so (the members grow the job if they may) and wait for g + 1.
    store_.add(gkey(g, "waiting"), 1);
    if (!wait_for_next(g, *closed)) return std::nullopt;
  }
}

// Generation g's members end it (grow, failure, lost) and bump gen. Two states would leave gen at g
// for ever, and every late agent waiting here with it; both are closed here after heartbeat_timeout:
//  - g's end is recorded but gen was never bumped: end_generation is three writes, and its caller
//    died between them (the chaos run: a lost host's agent, killed just after its worker, wrote
//    g30/end and g31/expected but not gen; the three survivors lost the race to end g30, came back
//    as late agents of g30, and waited here until the test gave up);
//  - g never ended and none of its members beats (all gone, no one left to notice).
bool Rendezvous::wait_for_next(int64_t g, int64_t members) {
  const Clock::time_point since = Clock::now();
  Clock::time_point last_beat = since, ended_seen{};
  int64_t beats = -1;
  bool said = false;
  while (generation() == g) {
    if (job_over()) return false;
    const Clock::time_point now = Clock::now();
    int64_t sum = 0;
    for (int64_t j = 0; j < members; ++j) sum += beat_of(g, static_cast<int>(j));
    if (sum != beats) beats = sum, last_beat = now;
    if (std::optional<GenerationEnd> end = end_of(g)) {
      // Timed from when the end was seen: a live ender bumps gen within milliseconds of writing it.
      if (ended_seen == Clock::time_point{}) ended_seen = now;
      if (now - ended_seen > options_.heartbeat_timeout) {
        if (options_.log_fd >= 0)
          detail::say(options_.log_fd, concat("generation ", g, " ended (", end->kind, ") but generation ", g + 1,
                                              " did not start within ", detail::seconds(now - ended_seen),
                                              ": the agent that ended it stopped half-way; starting it"));
        store_.compare_set(key_("gen"), std::to_string(g), std::to_string(g + 1));
        continue;
      }
    } else if (now - last_beat > options_.heartbeat_timeout) {
      const std::string text = concat("none of generation ", g, "'s ", members, " agent(s) sent a heartbeat for ",
                                      detail::seconds(now - last_beat));
      if (options_.log_fd >= 0) detail::say(options_.log_fd, text + "; ending it");
      // The agents waiting with this one make the next round (which also closes by last_call).
      end_generation(g, "lost", text, static_cast<int>(std::max<int64_t>(waiting(g), 1)));
      continue;
    }
    note_wait(since, said, concat("too late for generation ", g, " (", members, " agent(s)), waiting for it to end"));
    std::this_thread::sleep_for(options_.poll);
  }
  return true;
}

void Rendezvous::note_wait(Clock::time_point since, bool& said, const std::string& what) {
  if (said || options_.log_fd < 0 || Clock::now() - since <= options_.heartbeat_timeout) return;
  said = true;
  detail::say(options_.log_fd, concat(what, " for ", detail::seconds(Clock::now() - since)));
}

bool Rendezvous::end_generation(int64_t g, const std::string& kind, const std::string& text, int expected_next) {
  const std::string record = kind + " " + std::to_string(unix_ms_now()) + " " + text;
  if (store_.compare_set(gkey(g, "end"), "", record) != record) return false;
  store_.set(gkey(g + 1, "expected"), std::to_string(expected_next));
  store_.compare_set(key_("gen"), std::to_string(g), std::to_string(g + 1));
  return true;
}

std::optional<GenerationEnd> Rendezvous::end_of(int64_t g) {
  std::optional<std::string> record = store_.get(gkey(g, "end"));
  if (!record) return std::nullopt;
  GenerationEnd end;
  std::istringstream in(*record);
  in >> end.kind >> end.unix_ms;
  std::getline(in >> std::ws, end.text);
  return end;
}

void Rendezvous::beat(const Membership& m) {
  store_.add(gkey(m.generation, "beat/" + std::to_string(m.node_rank)), 1);
}

int64_t Rendezvous::beat_of(int64_t g, int member) {
  return get_int(gkey(g, "beat/" + std::to_string(member))).value_or(0);
}

void Rendezvous::mark_finished(const Membership& m) {
  store_.set(gkey(m.generation, "finished/" + std::to_string(m.node_rank)), "1");
}

bool Rendezvous::finished(int64_t g, int member) {
  return store_.get(gkey(g, "finished/" + std::to_string(member))).has_value();
}

int64_t Rendezvous::waiting(int64_t g) { return get_int(gkey(g, "waiting")).value_or(0); }

std::optional<std::string> Rendezvous::wait_in_generation(int64_t g, const std::string& key) {
  const Clock::time_point start = Clock::now();
  bool said = false;
  while (true) {
    if (std::optional<std::string> v = store_.get(gkey(g, key))) return v;
    if (generation() != g) return std::nullopt;
    if (Clock::now() - start > options_.join_timeout)
      throw TimeoutError(concat("[rendezvous] ", options_.run_id, ": generation ", g, "'s '", key,
                                        "' did not appear within ", options_.join_timeout.count() / 1000.0, " s"));
    note_wait(start, said, concat("waiting for generation ", g, "'s '", key, "' (", store_.describe(), ")"));
    std::this_thread::sleep_for(options_.poll);
  }
}

}  // namespace tessera::elastic
