#include "tessera/elastic/worker_watch.h"

#include <csignal>
#include <cstdio>
#include <fstream>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/worker_process.h"
#include "tessera/elastic/agent_log.h"

namespace tessera::elastic {

using Clock = std::chrono::steady_clock;
using tessera::detail::concat;

namespace {

// The state letter of /proc/<pid>/stat ("T" for a stopped process), for stall reports.
std::string process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return "unknown";
  char state = line[close + 2];
  if (state == 'T' || state == 't') return "T (stopped)";
  if (state == 'R') return "R (running)";
  if (state == 'S') return "S (sleeping)";
  if (state == 'D') return "D (uninterruptible sleep)";
  if (state == 'Z') return "Z (zombie)";
  return std::string(1, state);
}

}  // namespace

WorkerWatch::WorkerWatch(const Membership& m, int slots, std::shared_ptr<dist::TcpStore> worker_store,
                         const WorkerWatchOptions& options, ElasticResult& result)
    : m_(m), slots_(slots), store_(std::move(worker_store)), o_(options), result_(result), stragglers_(options.straggler_window) {}

std::optional<std::string> WorkerWatch::stall_report(int rank) const {
  auto it = stall_reports_.find(rank);
  if (it == stall_reports_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::map<int, dist::Heartbeat>> WorkerWatch::read_beats() {
  std::map<int, dist::Heartbeat> beats;
  try {
    for (int r = 0; r < m_.world_size(); ++r) {
      const std::string key = dist::worker_heartbeat_key(r);
      if (!store_->check({key})) continue;
      if (auto b = dist::parse_heartbeat(store_->get_string(key))) beats[r] = *b;
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  return beats;
}

void WorkerWatch::check_workers() {
  const Clock::time_point now = Clock::now();
  const int first = m_.first_rank();
  std::optional<std::map<int, dist::Heartbeat>> read = read_beats();
  if (!read) return;
  std::map<int, dist::Heartbeat>& beats = *read;
  for (auto& [r, b] : beats) {
    auto [it, fresh] = beats_.try_emplace(r, std::make_pair(b.count, now));
    if (fresh || it->second.first != b.count) it->second = {b.count, now};
  }
  // The group's ranks start beating together (at init_process_group); one that has not beaten
  // since the first of them did is as silent as one that stopped.
  if (!beats.empty())
    for (int r = first; r < first + slots_; ++r)
      if (!beats.count(r) && !beats_.count(r)) beats_[r] = {0, now};
  for (int r = first; r < first + slots_; ++r) {
    auto it = beats_.find(r);
    if (it == beats_.end() || stall_reports_.count(r) || pids_.count(r) == 0) continue;
    if (now - it->second.second <= o_.heartbeat_timeout) continue;
    const pid_t pid = pids_[r];
    std::string report = concat("rank ", r, " (pid ", pid, ") sent no heartbeat for ", detail::seconds(now - it->second.second),
                                " (process state ", process_state(pid), "); its last: ");
    if (!beats.count(r)) {
      report += "none since the process group started";
    } else {
      const dist::Heartbeat& mine = beats[r];
      report += mine.in_flight ? concat("in ", mine.call) : concat("before collective #", mine.sequence);
    }
    std::map<std::string, std::vector<int>> waiting;  // "allreduce #57" -> ranks in it
    for (auto& [q, b] : beats)
      if (q != r && b.in_flight) waiting[b.call].push_back(q);
    for (auto& [op, ranks] : waiting) {
      report += "; rank(s)";
      for (int q : ranks) report += " " + std::to_string(q);
      report += " wait for it in " + op;
    }
    detail::say(o_.stderr_fd, "stall: " + report + "; killing it");
    result_.stalls.push_back(report);
    stall_reports_[r] = report;
    dist::launcher::signal_worker(pid, SIGKILL);  // SIGKILL ends a stopped process too
  }
}

void WorkerWatch::poll_step() {
  try {
    if (store_ && store_->check({dist::launcher::kElasticStepKey}))
      last_step_ = std::stoll(store_->get_string(dist::launcher::kElasticStepKey));
  } catch (const std::exception&) {
  }
}

std::optional<std::string> WorkerWatch::generation_reach() {
  poll_step();
  if (last_step_ >= 0) return std::to_string(last_step_);
  try {
    if (!store_) return std::nullopt;
    if (store_->check({dist::launcher::kElasticResumedKey})) return store_->get_string(dist::launcher::kElasticResumedKey);
    return std::string(kNoStepDone);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool WorkerWatch::survivors_saved(int64_t generation) {
  try {
    return store_ && store_->check({dist::launcher::kElasticResumedFromKey}) &&
           store_->get_string(dist::launcher::kElasticResumedFromKey) == std::to_string(generation);
  } catch (const std::exception&) {
    return false;
  }
}

void WorkerWatch::check_recovery(Rendezvous& rdzv, std::set<int64_t>& reported) {
  if (m_.generation == 0 || reported.count(m_.generation)) return;
  std::optional<GenerationEnd> end = rdzv.end_of(m_.generation - 1);
  if (!end || last_step_ < 0) return;
  int64_t resumed = 0;
  try {  // this node's own worker store; read like poll_step reads it
    if (!store_->check({dist::launcher::kElasticResumedKey})) return;
    resumed = std::stoll(store_->get_string(dist::launcher::kElasticResumedKey));
  } catch (const std::exception&) {
    return;
  }
  if (last_step_ <= resumed) return;
  reported.insert(m_.generation);
  Recovery rec;
  rec.generation = m_.generation;
  rec.cause = end->kind;
  rec.world_size = m_.world_size();
  rec.seconds = static_cast<double>(unix_ms_now() - end->unix_ms) / 1000.0;
  rec.resumed_step = resumed;
  const int64_t previous = m_.generation - 1;
  std::string lost = "steps lost: unknown (the last generation's node 0 is gone, and the resumed step is not its "
                     "survivors' save)";
  const std::optional<std::string> reach = rdzv.get(concat("g", previous, "/last_step"));
  if (reach && *reach == kNoStepDone) {
    rec.steps_lost = 0;
    lost = "steps lost: 0 (rank 0 completed no step in it)";
  } else if (reach) {
    rec.last_step = std::stoll(*reach);
    rec.steps_lost = std::max<int64_t>(0, rec.last_step - resumed);
    lost = concat("steps lost: ", rec.steps_lost, " (it had reached step ", rec.last_step, ")");
  } else if (survivors_saved(previous)) {
    // Every step needs every replica's gradients, so no replica completed a step its survivors had
    // not, but for the one the dead rank may have finished as they waited for it: none any survivor
    // completed is lost.
    rec.steps_lost = 0;
    lost = concat("steps lost: 0 (resumed from the last step every surviving replica of generation ", previous,
                  " finished, saved from their memory; that generation's node 0 is gone with rank 0's own count)");
  }
  result_.recoveries.push_back(rec);
  char line[512];
  std::snprintf(line, sizeof line,
                "recovery: generation %lld (%d worker(s), after a %s) resumed training at step %lld, %.2f s after "
                "generation %lld ended; %s",
                static_cast<long long>(rec.generation), rec.world_size, rec.cause.c_str(), static_cast<long long>(rec.resumed_step),
                rec.seconds, static_cast<long long>(previous), lost.c_str());
  detail::say(o_.stderr_fd, line);
}

void WorkerWatch::check_stragglers() {
  const int world = m_.world_size();
  if (world < 2) return;
  std::optional<std::map<int, dist::Heartbeat>> beats = read_beats();
  if (!beats || static_cast<int>(beats->size()) < world) return;
  std::vector<std::map<int64_t, int64_t>> arrivals(static_cast<size_t>(world));
  for (auto& [r, b] : *beats) arrivals[static_cast<size_t>(r)] = std::move(b.arrivals);
  std::optional<StragglerReport> straggler = stragglers_.observe(arrivals);
  if (!straggler) return;
  detail::say(o_.stderr_fd, straggler->text);
  if (std::find(result_.stragglers.begin(), result_.stragglers.end(), straggler->rank) == result_.stragglers.end())
    result_.stragglers.push_back(straggler->rank);
}

}  // namespace tessera::elastic
