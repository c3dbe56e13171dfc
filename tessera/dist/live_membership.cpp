#include "tessera/dist/live_membership.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "tessera/dist/backends/backend.h"
#include "tessera/dist/heartbeat.h"
#include "tessera/dist/store/prefix_store.h"
#include "tessera/util/settings.h"
#include "tessera/util/whole_number.h"

namespace tessera::dist {

using tessera::detail::concat;
using Clock = std::chrono::steady_clock;

namespace {

std::string round_key(int64_t number, const std::string& what) { return concat("live/e", number, "/", what); }

int64_t read_count(Store& store, const std::string& key) { return store.add(key, 0); }

// The launch rank in an id of epoch 0's members ("r<rank>-<pid>"); nullopt for anyone else's.
std::optional<int64_t> launch_rank_of(const std::string& id) {
  const auto dash = id.find('-');
  if (id.size() < 2 || id[0] != 'r' || dash == std::string::npos) return std::nullopt;
  return parse_whole_number(std::string_view(id).substr(1, dash - 1));
}

}  // namespace

std::string format_live_arrival(const std::string& id, LivePosition position) {
  return concat(id, " ", position.step, " ", position.epoch);
}

std::optional<std::pair<std::string, LivePosition>> parse_live_arrival(const std::string& text) {
  std::istringstream in(text);
  std::string id, step, epoch, rest;
  if (!(in >> id >> step >> epoch) || (in >> rest)) return std::nullopt;
  const auto s = parse_whole_number(step), e = parse_whole_number(epoch);
  if (!s || !e) return std::nullopt;
  return std::make_pair(id, LivePosition{*s, *e});
}

std::string format_live_members(const LiveEpoch& epoch) {
  std::string text = concat("source ", epoch.source, "\n");
  for (int r = 0; r < epoch.size(); ++r) text += format_live_arrival(epoch.ids[r], epoch.positions[r]) + "\n";
  return text;
}

LiveEpoch parse_live_members(int64_t number, const std::string& text, const std::string& my_id) {
  LiveEpoch e;
  e.number = number;
  e.rank = -1;
  std::istringstream in(text);
  std::string line;
  auto bad = [&](const std::string& why) {
    return ValueError(concat("[live membership] the members of epoch ", number, " in the store are malformed (", why,
                             "): '", text.substr(0, 200), "'"));
  };
  if (!std::getline(in, line) || line.rfind("source ", 0) != 0) throw bad("no source line");
  const auto source = parse_whole_number(line.substr(7));
  if (!source) throw bad("the source is not a number");
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto member = parse_live_arrival(line);
    if (!member) throw bad("a member line");
    if (member->first == my_id) e.rank = e.size();
    e.ids.push_back(member->first);
    e.positions.push_back(member->second);
  }
  if (e.ids.empty() || *source >= static_cast<int64_t>(e.ids.size())) throw bad("no members, or the source is none");
  e.source = static_cast<int>(*source);
  return e;
}

LiveMembership::LiveMembership(std::shared_ptr<Store> root, std::string id, LiveOptions options)
    : root_(std::move(root)), id_(std::move(id)), options_(options) {
  TESSERA_CHECK(root_, "[live membership] needs the job's store");
}

std::unique_ptr<LiveMembership> LiveMembership::launched(std::shared_ptr<Store> root, int rank, int world,
                                                         LiveOptions options) {
  std::unique_ptr<LiveMembership> m(new LiveMembership(std::move(root), concat("r", rank, "-", ::getpid()), options));
  // Epoch 0's ids are known to this process only: nobody reads them before epoch 1 lists arrivals.
  m->current_.number = 0;
  m->current_.rank = rank;
  m->current_.ids.resize(static_cast<size_t>(world));
  m->current_.positions.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) m->current_.ids[static_cast<size_t>(r)] = concat("r", r);
  m->current_.ids[static_cast<size_t>(rank)] = m->id_;
  return m;
}

std::unique_ptr<LiveMembership> LiveMembership::asking_to_join(std::shared_ptr<Store> root, std::string id,
                                                               LiveOptions options) {
  std::unique_ptr<LiveMembership> m(new LiveMembership(std::move(root), std::move(id), options));
  m->current_.number = -1;  // a member of no epoch yet
  m->current_.rank = -1;
  m->member_ = false;
  m->register_as_joiner();
  return m;
}

void LiveMembership::register_as_joiner() {
  joiner_index_ = root_->add("live/joiners", 1);
}

int64_t LiveMembership::joiners_waiting() {
  const int64_t registered = read_count(*root_, "live/joiners");
  return registered - read_count(*root_, "live/admitted");
}

int64_t LiveMembership::admit_joiners() {
  const int64_t registered = read_count(*root_, "live/joiners");
  const int64_t admitted = read_count(*root_, "live/admitted");
  if (registered <= admitted) return 0;
  const int64_t next = current_.number + 1;
  // The count first: the round's closer, whoever arrives first, waits for exactly this many.
  root_->set(round_key(next, "expected"), std::to_string(current_.size() + (registered - admitted)));
  for (int64_t j = admitted + 1; j <= registered; ++j) root_->set(concat("live/admit/", j), std::to_string(next));
  root_->add("live/admitted", registered - admitted);
  return registered - admitted;
}

const LiveEpoch& LiveMembership::next_epoch(LivePosition mine) {
  TESSERA_CHECK(member_, "[live membership] ", id_, " is a member of no epoch: it must join()");
  // After a round that never closed (its closer lost), the next try is a fresh round.
  return meet(std::max(current_.number + 1, fresh_round_), mine);
}

void LiveMembership::mark_job_done() { root_->set("live/done", std::string("1")); }

bool LiveMembership::job_done() { return root_->check({"live/done"}); }

void LiveMembership::wait_unless_done(const std::string& key, Milliseconds wait, const std::string& waiting_for) {
  const Clock::time_point until = Clock::now() + wait;
  while (true) {
    if (job_done()) throw JobEnded(concat("[live membership] ", id_, ": the job ended while this process waited for ", waiting_for));
    const auto left = std::chrono::duration_cast<Milliseconds>(until - Clock::now());
    if (left <= Milliseconds(0))
      throw TimeoutError(concat("[live membership] ", id_, " waited ", wait.count(), " ms for ", waiting_for, " (", key, ")"));
    try {
      root_->wait({key}, std::min(left, Milliseconds(1000)));
      return;
    } catch (const TimeoutError&) {
    }
  }
}

const LiveEpoch& LiveMembership::join(LivePosition mine, Milliseconds wait) {
  if (joiner_index_ == 0) register_as_joiner();  // a late member asks again
  const std::string admit = concat("live/admit/", joiner_index_);
  try {
    wait_unless_done(admit, wait, "its admission");
  } catch (const JobEnded&) {
    throw;
  } catch (const TimeoutError&) {
    throw NotAdmittedYet(concat("[live membership] ", id_, " asked to join the running job (joiner ", joiner_index_,
                                ") and was not admitted within ", wait.count(),
                                " ms: no member reached a step boundary (is the job stuck, or over?)"));
  }
  const auto number = parse_whole_number(root_->get_string(admit));
  TESSERA_CHECK(number.has_value(), "[live membership] malformed admission for joiner ", joiner_index_);
  joiner_index_ = 0;
  return meet(*number, mine);
}

const LiveEpoch& LiveMembership::meet(int64_t number, LivePosition mine) {
  const int64_t n = root_->add(round_key(number, "arrivals"), 1);
  root_->set(round_key(number, concat("arrival/", n)), format_live_arrival(id_, mine));
  const std::string members = round_key(number, "members");
  try {
    if (n == 1) close_round(number);
    wait_unless_done(members, options_.round_timeout, concat("the members of round ", number));
  } catch (const JobEnded&) {
    throw;
  } catch (const TimeoutError&) {
    fresh_round_ = std::max(fresh_round_, number + 1);
    throw TimeoutError(concat("[live membership] ", id_, " arrived at round ", number, " (arrival ", n,
                              ") and its members were not written within ", options_.round_timeout.count(),
                              " ms: the member closing it was lost; the next try meets in round ", number + 1));
  }
  LiveEpoch e = parse_live_members(number, root_->get_string(members), id_);
  if (e.rank < 0) {
    member_ = false;  // current_ stays the last epoch it was a member of: it still orders a round it closes
    fresh_round_ = std::max(fresh_round_, number + 1);
    throw LateForEpoch(concat("[live membership] ", id_, " arrived at round ", number, " after it closed"));
  }
  current_ = std::move(e);
  member_ = true;
  return current_;
}

std::map<std::string, int64_t> LiveMembership::ranks_in_epoch(int64_t number) {
  // Epoch 0's members are known by their launch ranks alone ("r<rank>-<pid>"); a later epoch's are
  // in the store. Whoever closes a round (a joiner knows no epoch) orders the members alike.
  std::map<std::string, int64_t> ranks;
  if (number >= 1 && root_->check({round_key(number, "members")})) {
    const LiveEpoch e = parse_live_members(number, root_->get_string(round_key(number, "members")), id_);
    for (int r = 0; r < e.size(); ++r) ranks[e.ids[static_cast<size_t>(r)]] = r;
  }
  return ranks;
}

void LiveMembership::close_round(int64_t number) {
  const Clock::time_point give_up = Clock::now() + options_.round_timeout;
  // The epoch before's members (a round that closed never; the newest one that did).
  std::map<std::string, int64_t> previous;
  for (int64_t before = number - 1; before >= 1 && previous.empty(); --before) previous = ranks_in_epoch(before);
  auto was_a_member = [&](const std::string& id) {
    if (previous.count(id)) return true;
    return previous.empty() && launch_rank_of(id).has_value();  // epoch 0's
  };
  auto a_member_arrived = [&](int64_t seen) {
    for (int64_t k = 1; k <= seen; ++k) {
      const std::string key = round_key(number, concat("arrival/", k));
      if (!root_->check({key})) continue;
      if (auto a = parse_live_arrival(root_->get_string(key)); a && was_a_member(a->first)) return true;
    }
    return false;
  };
  int64_t seen = read_count(*root_, round_key(number, "arrivals"));
  while (true) {
    int64_t expected = 0;
    if (root_->check({round_key(number, "expected")}))
      expected = parse_whole_number(root_->get_string(round_key(number, "expected"))).value_or(0);
    if (expected > 0 && seen >= expected) break;
    if (Clock::now() >= give_up)
      throw TimeoutError(concat("[live membership] ", id_, " closing round ", number, " saw no member of the epoch "
                                "before arrive within ", options_.round_timeout.count(), " ms"));
    // The next arrival, or the end of the settle time: the store's wait answers at either. A round
    // of joiners alone (admitted at a step boundary where the job then stopped) never closes: they
    // wait for a member, or for the job's end.
    try {
      root_->wait({round_key(number, concat("arrival/", seen + 1))}, options_.settle);
    } catch (const TimeoutError&) {
      if (a_member_arrived(seen)) break;
      if (job_done()) throw JobEnded(concat("[live membership] ", id_, ": the job ended before round ", number, " met"));
    }
    seen = read_count(*root_, round_key(number, "arrivals"));
  }
  seen = read_count(*root_, round_key(number, "arrivals"));
  struct Arrival {
    std::string id;
    LivePosition position;
    int64_t order;  // the rank in the epoch before, or after every member for a joiner
  };
  std::vector<Arrival> arrivals;
  std::set<std::string> ids;
  for (int64_t k = 1; k <= seen; ++k) {
    // Each arrival writes its line right after counting itself; one that died in between is left out.
    const std::string key = round_key(number, concat("arrival/", k));
    try {
      root_->wait({key}, Milliseconds(2000));
    } catch (const TimeoutError&) {
      continue;
    }
    auto a = parse_live_arrival(root_->get_string(key));
    TESSERA_CHECK(a.has_value(), "[live membership] arrival ", k, " of round ", number, " is malformed");
    if (!ids.insert(a->first).second) continue;  // the same process twice (a try after a timeout)
    // The members of the epoch before in their order there (rank 0 stays rank 0 where it survived),
    // then joiners in the order they arrived.
    int64_t order = 1'000'000 + k;
    if (auto it = previous.find(a->first); it != previous.end())
      order = it->second;
    else if (previous.empty())
      order = launch_rank_of(a->first).value_or(order);
    arrivals.push_back({a->first, a->second, order});
  }
  std::stable_sort(arrivals.begin(), arrivals.end(), [](const Arrival& a, const Arrival& b) { return a.order < b.order; });
  LiveEpoch e;
  e.number = number;
  for (const Arrival& a : arrivals) {
    e.ids.push_back(a.id);
    e.positions.push_back(a.position);
  }
  for (int r = 1; r < e.size(); ++r)
    if (e.positions[static_cast<size_t>(e.source)] < e.positions[static_cast<size_t>(r)]) e.source = r;
  root_->set(round_key(number, "members"), format_live_members(e));
}

ProcessGroupPtr LiveMembership::make_group(const std::string& backend, Milliseconds timeout, int heartbeat_rank,
                                           Milliseconds heartbeat) const {
  TESSERA_CHECK(member_, "[live membership] ", id_, " is a member of no epoch");
  BackendContext context;
  context.store = std::make_shared<PrefixStore>(round_key(current_.number, "pg/"), root_);
  context.rank = current_.rank;
  context.size = current_.size();
  context.local_size = 0;  // the backend finds out which members share this machine
  context.timeout = timeout;
  std::unique_ptr<Communicator> communicator = make_communicator(backend, context);
  ProcessGroupOptions options;
  options.timeout = timeout;
  options.collective_check = env_flag("TESSERA_COLLECTIVE_CHECK", options.collective_check);
  options.exit_when_stuck_after_mismatch = true;
  options.wait_for_failure_reports = false;  // the survivors regroup at once
  if (heartbeat > Milliseconds(0) && heartbeat_rank >= 0) {
    options.heartbeat = heartbeat;
    options.heartbeat_store = std::make_shared<PrefixStore>(group_store_prefix(0), root_);
    options.heartbeat_rank = heartbeat_rank;
  }
  return std::make_shared<ProcessGroup>(std::move(communicator), context.store, options, std::vector<int>{},
                                        concat("live-e", current_.number));
}

}  // namespace tessera::dist
