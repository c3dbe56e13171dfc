#include "tessera/elastic/elastic_agent.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <sched.h>
#include <sys/wait.h>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/heartbeat.h"
#include "tessera/dist/net/interface.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/job_token.h"
#include "tessera/dist/launcher/rendezvous.h"
#include "tessera/dist/launcher/supervisor.h"
#include "tessera/dist/launcher/worker_process.h"
#include "tessera/dist/store/tcp_store.h"
#include "tessera/elastic/rendezvous.h"
#include "tessera/elastic/straggler_detector.h"
#include "tessera/util/settings.h"

namespace tessera::elastic {

namespace {

using Clock = std::chrono::steady_clock;
using tessera::detail::concat;

void say(int fd, const std::string& line) {
  std::string text = "tessera run: " + line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string seconds(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", std::chrono::duration<double>(d).count());
  return text;
}

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

int usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// What happened to one generation.
enum class Outcome { kFinished, kLocalFailure, kMembershipChanged, kFatal };

class Agent {
 public:
  explicit Agent(const ElasticOptions& o) : o_(o), slots_(o.nproc_per_node) {
    TESSERA_CHECK(!o_.command.empty(), "[run] no PROGRAM given (usage: tessera run --nnodes MIN:MAX "
                                       "--nproc-per-node N --rdzv-endpoint HOST:PORT -- PROGRAM ARGS...)");
    TESSERA_CHECK(o_.nproc_per_node >= 1, "[run] --nproc-per-node must be at least 1");
    TESSERA_CHECK(o_.max_restarts >= 0, "[run] --max-restarts must not be negative");
    TESSERA_CHECK(o_.backend == "store" || o_.backend == "etcd", "[run] --rdzv-backend must be store or etcd, got '",
                  o_.backend, "'");
    token_ = o_.job_token;
    if (token_.empty())
      if (const char* env = env_setting("TESSERA_JOB_TOKEN"); env != nullptr) token_ = env;
    if (token_.empty()) {
      TESSERA_CHECK(o_.max_nodes == 1, "[run] an elastic job of several agents needs the same TESSERA_JOB_TOKEN on "
                                       "every machine; e.g. `export TESSERA_JOB_TOKEN=$(od -An -tx1 -N16 "
                                       "/dev/urandom | tr -d ' \\n')`");
      token_ = dist::launcher::random_job_token();
    }
    threads_ = o_.threads_per_worker;
    if (threads_ <= 0) {
      if (const char* env = env_setting("TESSERA_NUM_THREADS"); env != nullptr && std::atoi(env) > 0)
        threads_ = std::atoi(env);
      else
        threads_ = std::max(1, usable_cores() / o_.nproc_per_node);
    }
    auto [host, port] = parse_endpoint(o_.endpoint);
    // Where this agent's workers' store listens when it is node 0: loopback for a rendezvous on this
    // machine's loopback, else the interface that reaches the rendezvous (dist/net/interface.h).
    local_addr_ = o_.local_addr.empty() ? dist::detail::listen_address(host, "the --rdzv-endpoint host") : o_.local_addr;
    if (o_.backend == "store") {
      // The first agent to bind the endpoint hosts the store; the others are its clients.
      try {
        store_host_ = dist::launcher::start_rendezvous_server(host, port, token_);
        say(o_.stderr_fd, concat("hosting the rendezvous store at ", o_.endpoint));
      } catch (const IoError&) {
      }
      dist::TcpStoreOptions c;
      c.host = host;
      c.port = static_cast<uint16_t>(port);
      c.token = token_;
      c.timeout = Milliseconds(30000);
      c.connect_timeout = o_.join_timeout;
      store_ = make_store_rendezvous(std::make_shared<dist::TcpStore>(c), o_.endpoint);
    } else {
      store_ = make_etcd_rendezvous(host, port, o_.join_timeout);
    }
    char hostname[256] = "host";
    ::gethostname(hostname, sizeof hostname - 1);
    agent_id_ = concat(hostname, ":", ::getpid());
    RendezvousOptions r;
    r.run_id = o_.run_id;
    r.min_nodes = o_.min_nodes;
    r.max_nodes = o_.max_nodes;
    r.last_call = o_.last_call;
    r.join_timeout = o_.join_timeout;
    rdzv_ = std::make_unique<Rendezvous>(*store_, r, agent_id_);
  }

  ElasticResult run() {
    while (true) {
      std::optional<Membership> m;
      try {
        m = rdzv_->join(slots_, local_addr_);
      } catch (const TimeoutError& e) {
        return fail(e.what());
      }
      if (!m) return job_over();
      ++result_.generations;
      Outcome outcome = run_generation(*m);
      if (outcome == Outcome::kFinished) return finish(*m);
      if (outcome == Outcome::kFatal) return fail(fatal_);
      if (!config_error_.empty()) {
        return fail(concat(config_error_, ": a configuration or input error that a restart would repeat; not "
                           "retried: fix it and start the job again"));
      }
      std::optional<GenerationEnd> end = rdzv_->end_of(m->generation);
      if (end) say(o_.stderr_fd, concat("generation ", m->generation, " ended (", end->kind, "): ", end->text));
      if (end && (end->kind == "failure" || end->kind == "lost")) {
        ++result_.restarts;
        result_.failures.push_back(concat("generation ", m->generation, ": ", end->text));
        if (result_.restarts > o_.max_restarts) {
          std::string message = concat("gave up after ", o_.max_restarts, " restart(s) (--max-restarts ",
                                       o_.max_restarts, "); failures:");
          for (const std::string& f : result_.failures) message += " [" + f + "]";
          rdzv_->set("failed", message);
          return fail(message);
        }
      }
      if (slots_ == 0) return leave();
    }
  }

 private:
  Outcome run_generation(const Membership& m) {
    const int64_t g = m.generation;
    const int world = m.world_size(), first = m.first_rank();
    say(o_.stderr_fd, concat("generation ", g, ": ", m.members.size(), " agent(s), ", world, " worker(s); node ",
                             m.node_rank, " runs rank(s) ", first, "-", first + slots_ - 1));
    // Node 0 hosts this generation's worker store: fresh keys for every generation's process group.
    std::unique_ptr<dist::launcher::RendezvousServer> worker_store_host;
    std::string master_host = local_addr_;
    int master_port = 0;
    try {
      if (m.node_rank == 0) {
        worker_store_host = dist::launcher::start_rendezvous_server(local_addr_, 0, token_);
        master_port = worker_store_host->port();
        rdzv_->set(concat("g", g, "/master"), concat(master_host, " ", master_port));
      } else {
        std::optional<std::string> master = rdzv_->wait_in_generation(g, "master");
        if (!master) return Outcome::kMembershipChanged;
        std::istringstream in(*master);
        in >> master_host >> master_port;
      }
      dist::TcpStoreOptions c;
      c.host = master_host;
      c.port = static_cast<uint16_t>(master_port);
      c.token = token_;
      c.timeout = Milliseconds(5000);
      c.connect_timeout = Milliseconds(10000);
      worker_store_ = std::make_shared<dist::TcpStore>(c);
    } catch (const Error& e) {
      fatal_ = e.what();
      return Outcome::kFatal;
    }
    std::vector<dist::launcher::detail::ProcessSpec> specs;
    for (int local = 0; local < slots_; ++local) {
      dist::launcher::WorkerEnv env;
      env.rank = first + local;
      env.world_size = world;
      env.local_rank = local;
      env.local_world_size = slots_;
      env.node_rank = m.node_rank;
      env.master_addr = master_host;
      env.master_port = master_port;
      env.job_token = token_;
      env.num_threads = threads_;
      auto vars = dist::launcher::to_variables(env);
      vars[dist::launcher::kElasticGenerationVariable] = std::to_string(g);
      vars[dist::launcher::kRestartCountVariable] = std::to_string(result_.restarts);
      vars[dist::launcher::kElasticMaxWorldVariable] = std::to_string(o_.max_nodes * o_.nproc_per_node);
      vars[dist::launcher::kHeartbeatMsVariable] = std::to_string(o_.heartbeat_interval.count());
      specs.push_back({false, env.rank, vars});
    }
    dist::launcher::LaunchOptions job;
    job.nproc_per_node = slots_;
    job.command = o_.command;
    job.job_token = token_;
    job.threads_per_worker = threads_;
    job.grace_period = o_.grace_period;
    job.stdout_fd = o_.stdout_fd;
    job.stderr_fd = o_.stderr_fd;
    job.watch_interval = std::min(Milliseconds(100), o_.heartbeat_interval);
    pids_.clear();
    local_failure_ = false;
    stall_reports_.clear();
    worker_beats_.clear();
    agent_beats_.clear();
    stragglers_.reset();
    last_step_ = -1;
    next_beat_ = Clock::now();
    next_window_ = Clock::now() + o_.straggler_window;
    job.on_spawn = [this](int rank, pid_t pid) { pids_[rank] = pid; };
    job.on_failure = [this, &m](int rank, int status, const std::string& what) {
      // End the generation at once, so the other agents stop their workers while ours stop.
      std::string text = what;
      if (auto it = stall_reports_.find(rank); it != stall_reports_.end()) text += " after stalling: " + it->second;
      // A worker that exits while the generation is already over (the others stopped it, e.g. a
      // SIGTERM'd trainer's 130) is part of the membership change, not a failure.
      // A worker killed by a signal (kill -9, a crash, our SIGKILL of a stalled one) loses its slot;
      // one that exited non-zero (an exception: often a peer's death seen first) is restarted in place.
      drop_slot_ = WIFSIGNALED(status);
      // A configuration or input error would repeat in every generation: the job stops at once.
      if (WIFEXITED(status) && WEXITSTATUS(status) == dist::launcher::kConfigErrorExitStatus && config_error_.empty())
        config_error_ = text;
      const int left = slots_ - (drop_slot_ ? 1 : 0);
      try {
        local_failure_ = rdzv_->generation() == m.generation &&
                         rdzv_->end_generation(m.generation, "failure", text,
                                               static_cast<int>(m.members.size()) - (left == 0 ? 1 : 0));
      } catch (const Error& e) {
        fatal_ = e.what();
      }
      stop_local_workers(rank);  // as for the other agents' workers in watch()
    };
    job.watch = [this, &m] { return watch(m); };
    dist::launcher::LaunchResult r;
    try {
      r = dist::launcher::detail::supervise(job, specs);
    } catch (const Error& e) {
      fatal_ = e.what();
      return Outcome::kFatal;
    }
    // The last step rank 0 reached, for the next generation's recovery report.
    if (m.node_rank == 0) {
      poll_step();
      try {
        if (last_step_ >= 0) rdzv_->set(concat("g", g, "/last_step"), std::to_string(last_step_));
      } catch (const Error&) {
      }
    }
    worker_store_.reset();
    if (r.failed_rank >= 0 && local_failure_) {
      if (drop_slot_) --slots_;
      say(o_.stderr_fd, concat(r.message, "; ", slots_, " worker(s) left on this node"));
      return Outcome::kLocalFailure;
    }
    if (!fatal_.empty()) return Outcome::kFatal;
    if (r.interrupted || r.failed_rank >= 0) return Outcome::kMembershipChanged;
    if (r.exit_code != 0) {  // a signal forwarded to us, or a timeout
      fatal_ = r.message;
      return Outcome::kFatal;
    }
    // "done" before "finished": the store's host may exit as soon as every member has finished.
    try {
      rdzv_->set("done", "1");
      rdzv_->mark_finished(m);
    } catch (const Error&) {
    }
    // Node 0 hosts the worker store and maybe the rendezvous store: stay until the others are done.
    if (m.node_rank == 0 || store_host_) wait_for_members(m);
    return Outcome::kFinished;
  }

  // Every watch_interval while the workers run; true stops them.
  bool watch(const Membership& m) {
    try {
      const Clock::time_point now = Clock::now();
      if (now >= next_beat_) {
        next_beat_ = now + o_.heartbeat_interval;
        rdzv_->beat(m);
        // Once the generation has ended, node 0 may already have closed its worker store: beat
        // only (the others' stop waits on it), and check nobody.
        if (rdzv_->generation() == m.generation) {
          if (check_agents(m)) return true;
          check_workers(m);
        }
      }
      if (rdzv_->generation() != m.generation) {
        // Survivors of a failure cannot finish their step without the dead peer: SIGTERM would only
        // make them wait out the grace period in a collective, so they are asked (SIGUSR1) to save
        // their last whole step from memory and exit at once. After a "grow" everyone is alive,
        // and SIGTERM lets the trainer checkpoint the step it is in.
        std::optional<GenerationEnd> end = rdzv_->end_of(m.generation);
        if (!end || end->kind != "grow") stop_local_workers(-1);
        return true;
      }
      if (m.node_rank == 0) {
        poll_step();
        check_recovery(m);
        if (static_cast<int>(m.members.size()) < o_.max_nodes) {
          if (int64_t waiting = rdzv_->waiting(m.generation); waiting > 0) {
            rdzv_->end_generation(m.generation, "grow", concat(waiting, " agent(s) waiting to join"),
                                  static_cast<int>(std::min<int64_t>(m.members.size() + waiting, o_.max_nodes)));
            return true;
          }
        }
        if (now >= next_window_) {
          next_window_ = now + o_.straggler_window;
          check_stragglers(m);
        }
      }
    } catch (const Error& e) {
      fatal_ = concat("lost the rendezvous (", store_->describe(), "): ", e.what());
      return true;
    }
    return false;
  }

  // After a failure: SIGUSR1 asks each surviving worker to save the state it holds in memory and
  // exit (train/survivor_save.h); the supervisor's SIGTERM and, after the grace period, SIGKILL
  // follow for any that cannot. A program without the handler dies of SIGUSR1 at once.
  void stop_local_workers(int except_rank) {
    for (auto& [rank, pid] : pids_)
      if (rank != except_rank) dist::launcher::signal_worker(pid, SIGUSR1);
  }

  // True when another agent's heartbeat stopped (this generation is then ended).
  bool check_agents(const Membership& m) {
    const Clock::time_point now = Clock::now();
    for (int j = 0; j < static_cast<int>(m.members.size()); ++j) {
      if (j == m.node_rank) continue;
      int64_t beat = rdzv_->beat_of(m.generation, j);
      auto [it, fresh] = agent_beats_.try_emplace(j, std::make_pair(beat, now));
      if (fresh || it->second.first != beat) {
        it->second = {beat, now};
        continue;
      }
      if (now - it->second.second > o_.heartbeat_timeout && !rdzv_->finished(m.generation, j)) {
        std::string text = concat("agent ", m.members[static_cast<size_t>(j)].id, " (node ", j,
                                  ") sent no heartbeat for ", seconds(now - it->second.second));
        say(o_.stderr_fd, text);
        rdzv_->end_generation(m.generation, "lost", text, static_cast<int>(m.members.size()) - 1);
        return true;
      }
    }
    return false;
  }

  // The workers' heartbeats, from node 0's worker store; nullopt when that store cannot be read.
  // Not fatal here: node 0 closes it when its generation ends, which can race this read on another
  // node (the grow race), and a node 0 that died is found by its agent's missing heartbeat.
  std::optional<std::map<int, dist::Heartbeat>> read_worker_beats(int world) {
    std::map<int, dist::Heartbeat> beats;
    try {
      for (int r = 0; r < world; ++r) {
        const std::string key = dist::worker_heartbeat_key(r);
        if (!worker_store_->check({key})) continue;
        if (auto b = dist::parse_heartbeat(worker_store_->get_string(key))) beats[r] = *b;
      }
    } catch (const Error&) {
      return std::nullopt;
    }
    return beats;
  }

  // A local worker whose heartbeat stopped is reported with what the others wait in, then killed.
  void check_workers(const Membership& m) {
    const Clock::time_point now = Clock::now();
    const int world = m.world_size(), first = m.first_rank();
    std::optional<std::map<int, dist::Heartbeat>> read = read_worker_beats(world);
    if (!read) return;
    std::map<int, dist::Heartbeat>& beats = *read;
    for (auto& [r, b] : beats) {
      auto [it, fresh] = worker_beats_.try_emplace(r, std::make_pair(b.count, now));
      if (fresh || it->second.first != b.count) it->second = {b.count, now};
    }
    // The group's ranks start beating together (at init_process_group); one that has not beaten
    // since the first of them did is as silent as one that stopped.
    if (!beats.empty())
      for (int r = first; r < first + slots_; ++r)
        if (!beats.count(r) && !worker_beats_.count(r)) worker_beats_[r] = {0, now};
    for (int r = first; r < first + slots_; ++r) {
      auto it = worker_beats_.find(r);
      if (it == worker_beats_.end() || stall_reports_.count(r) || pids_.count(r) == 0) continue;
      if (now - it->second.second <= o_.heartbeat_timeout) continue;
      const pid_t pid = pids_[r];
      std::string report = concat("rank ", r, " (pid ", pid, ") sent no heartbeat for ", seconds(now - it->second.second),
                                  " (process state ", process_state(pid), "); its last: ");
      if (!beats.count(r)) {
        report += "none since the process group started";
      } else {
        const dist::Heartbeat& mine = beats[r];
        report += mine.in_flight ? concat("in ", mine.call)
                                 : concat("before collective #", mine.sequence);
      }
      std::map<std::string, std::vector<int>> waiting;  // "allreduce #57" -> ranks in it
      for (auto& [q, b] : beats)
        if (q != r && b.in_flight) waiting[b.call].push_back(q);
      for (auto& [op, ranks] : waiting) {
        report += "; rank(s)";
        for (int q : ranks) report += " " + std::to_string(q);
        report += " wait for it in " + op;
      }
      say(o_.stderr_fd, "stall: " + report + "; killing it");
      result_.stalls.push_back(report);
      stall_reports_[r] = report;
      dist::launcher::signal_worker(pid, SIGKILL);  // SIGKILL ends a stopped process too
    }
  }

  void poll_step() {
    try {
      if (worker_store_ && worker_store_->check({dist::launcher::kElasticStepKey}))
        last_step_ = std::stoll(worker_store_->get_string(dist::launcher::kElasticStepKey));
    } catch (const std::exception&) {
    }
  }

  // Node 0 of a generation that follows a failure, loss or growth: once rank 0 completes a step
  // past the one it resumed at, training has resumed.
  void check_recovery(const Membership& m) {
    if (m.generation == 0 || reported_.count(m.generation)) return;
    std::optional<GenerationEnd> end = rdzv_->end_of(m.generation - 1);
    if (!end || last_step_ < 0) return;
    int64_t resumed = 0;
    try {  // this node's own worker store; read like poll_step reads it
      if (!worker_store_->check({dist::launcher::kElasticResumedKey})) return;
      resumed = std::stoll(worker_store_->get_string(dist::launcher::kElasticResumedKey));
    } catch (const std::exception&) {
      return;
    }
    if (last_step_ <= resumed) return;
    reported_.insert(m.generation);
    Recovery rec;
    rec.generation = m.generation;
    rec.cause = end->kind;
    rec.world_size = m.world_size();
    rec.seconds = static_cast<double>(unix_ms_now() - end->unix_ms) / 1000.0;
    rec.resumed_step = resumed;
    if (auto last = rdzv_->get(concat("g", m.generation - 1, "/last_step"))) rec.last_step = std::stoll(*last);
    if (rec.last_step >= 0) rec.steps_lost = std::max<int64_t>(0, rec.last_step - resumed);
    result_.recoveries.push_back(rec);
    char line[320];
    char lost[96] = "steps lost: unknown (the last generation's node 0 is gone)";
    if (rec.last_step >= 0)
      std::snprintf(lost, sizeof lost, "steps lost: %lld (it had reached step %lld)", static_cast<long long>(rec.steps_lost),
                    static_cast<long long>(rec.last_step));
    std::snprintf(line, sizeof line,
                  "recovery: generation %lld (%d worker(s), after a %s) resumed training at step %lld, %.2f s after "
                  "generation %lld ended; %s",
                  static_cast<long long>(rec.generation), rec.world_size, rec.cause.c_str(),
                  static_cast<long long>(rec.resumed_step), rec.seconds, static_cast<long long>(m.generation - 1), lost);
    say(o_.stderr_fd, line);
  }

  // Every straggler window: the workers' arrivals at their latest collectives, to the detector.
  void check_stragglers(const Membership& m) {
    const int world = m.world_size();
    if (world < 2) return;
    std::optional<std::map<int, dist::Heartbeat>> beats = read_worker_beats(world);
    if (!beats || static_cast<int>(beats->size()) < world) return;
    std::vector<std::map<int64_t, int64_t>> arrivals(static_cast<size_t>(world));
    for (auto& [r, b] : *beats) arrivals[static_cast<size_t>(r)] = std::move(b.arrivals);
    std::optional<StragglerReport> straggler = stragglers_.observe(arrivals);
    if (!straggler) return;
    say(o_.stderr_fd, straggler->text);
    if (std::find(result_.stragglers.begin(), result_.stragglers.end(), straggler->rank) == result_.stragglers.end())
      result_.stragglers.push_back(straggler->rank);
  }

  void wait_for_members(const Membership& m) {
    std::map<int, std::pair<int64_t, Clock::time_point>> beats;
    // The rendezvous store's host leaves once every member has finished, this one included; a
    // node 0 that does not host it may then find the store gone while it still waits. Having
    // finished itself, it has nothing left to wait for.
    if (!store_host_) {
      try {
        wait_for_members_polling(m, beats);
      } catch (const Error&) {
      }
      return;
    }
    wait_for_members_polling(m, beats);
  }

  void wait_for_members_polling(const Membership& m, std::map<int, std::pair<int64_t, Clock::time_point>>& beats) {
    while (true) {
      bool all = true;
      const Clock::time_point now = Clock::now();
      for (int j = 0; j < static_cast<int>(m.members.size()); ++j) {
        if (j == m.node_rank || rdzv_->finished(m.generation, j)) continue;
        int64_t beat = rdzv_->beat_of(m.generation, j);
        auto [it, fresh] = beats.try_emplace(j, std::make_pair(beat, now));
        if (fresh || it->second.first != beat) it->second = {beat, now};
        if (now - it->second.second <= o_.heartbeat_timeout) all = false;  // alive and not done yet
      }
      if (all) return;
      std::this_thread::sleep_for(o_.heartbeat_interval);
    }
  }

  ElasticResult finish(const Membership& m) {
    say(o_.stderr_fd, concat("job finished in generation ", m.generation, " after ", result_.restarts, " restart(s)"));
    return result_;
  }

  ElasticResult job_over() {
    if (auto failed = rdzv_->get("failed")) return fail(*failed);
    return result_;  // finished by the others
  }

  // This agent's workers all failed: it stays (as the store's host the others need it) until the
  // job ends, without workers.
  ElasticResult leave() {
    say(o_.stderr_fd, "no workers left on this node; the job goes on without it");
    Clock::time_point last_change = Clock::now();
    int64_t last_gen = -1;
    while (true) {
      if (rdzv_->get("done")) return result_;
      if (auto failed = rdzv_->get("failed")) return fail(*failed);
      int64_t g = rdzv_->generation();
      if (g != last_gen) last_gen = g, last_change = Clock::now();
      if (!store_host_ || Clock::now() - last_change > o_.join_timeout * 10) return result_;
      std::this_thread::sleep_for(o_.heartbeat_interval);
    }
  }

  ElasticResult fail(const std::string& message) {
    try {
      rdzv_->set("failed", message);
    } catch (const Error&) {
    }
    result_.exit_code = 1;
    result_.message = message;
    return result_;
  }

  const ElasticOptions o_;
  std::string local_addr_;  // o_.local_addr, or the address chosen for it
  std::string config_error_;  // a local worker's failure that a restart would repeat
  int slots_;
  std::string token_;
  int threads_ = 1;
  std::string agent_id_;
  std::unique_ptr<dist::launcher::RendezvousServer> store_host_;
  std::unique_ptr<RendezvousStore> store_;
  std::unique_ptr<Rendezvous> rdzv_;
  std::shared_ptr<dist::TcpStore> worker_store_;
  ElasticResult result_;
  std::string fatal_;
  bool local_failure_ = false;  // this generation ended because one of our workers failed
  bool drop_slot_ = false;      // ... by a signal: its slot is not used again
  std::map<int, pid_t> pids_;
  std::map<int, std::string> stall_reports_;
  std::map<int, std::pair<int64_t, Clock::time_point>> worker_beats_, agent_beats_;
  StragglerDetector stragglers_{std::chrono::duration_cast<std::chrono::milliseconds>(o_.straggler_window)};
  std::set<int64_t> reported_;
  int64_t last_step_ = -1;
  Clock::time_point next_beat_, next_window_;
};

}  // namespace

std::pair<int, int> parse_nnodes(const std::string& text) {
  try {
    size_t colon = text.find(':');
    size_t used = 0;
    if (colon == std::string::npos) {
      int n = std::stoi(text, &used);
      if (used == text.size() && n >= 1) return {n, n};
    } else {
      int lo = std::stoi(text.substr(0, colon), &used);
      size_t used_hi = 0;
      int hi = std::stoi(text.substr(colon + 1), &used_hi);
      if (used == colon && used_hi == text.size() - colon - 1 && lo >= 1 && lo <= hi) return {lo, hi};
    }
  } catch (const std::exception&) {
  }
  throw ValueError("[run] --nnodes takes N or MIN:MAX with 1 <= MIN <= MAX, got '" + text + "'");
}

std::pair<std::string, int> parse_endpoint(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon != std::string::npos && colon > 0) {
    try {
      size_t used = 0;
      int port = std::stoi(text.substr(colon + 1), &used);
      if (used == text.size() - colon - 1 && port > 0 && port <= 65535) return {text.substr(0, colon), port};
    } catch (const std::exception&) {
    }
  }
  throw ValueError("[run] --rdzv-endpoint takes HOST:PORT, got '" + text + "'");
}

ElasticResult run_elastic(const ElasticOptions& options) { return Agent(options).run(); }

}  // namespace tessera::elastic
