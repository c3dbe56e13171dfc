#include "tessera/elastic/elastic_agent.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <sys/wait.h>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/heartbeat.h"
#include "tessera/dist/net/interface.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/job_token.h"
#include "tessera/dist/launcher/launcher.h"
#include "tessera/dist/launcher/rendezvous.h"
#include "tessera/dist/launcher/supervisor.h"
#include "tessera/dist/launcher/worker_process.h"
#include "tessera/dist/store/tcp_store.h"
#include "tessera/elastic/agent_heartbeats.h"
#include "tessera/elastic/agent_log.h"
#include "tessera/elastic/rendezvous.h"
#include "tessera/elastic/worker_watch.h"
#include "tessera/util/settings.h"

namespace tessera::elastic {

namespace {

using Clock = std::chrono::steady_clock;
using tessera::detail::concat;

using detail::say;
using detail::seconds;

using dist::launcher::usable_cores;

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
      threads_ = static_cast<int>(env_int("TESSERA_NUM_THREADS", 0));
      if (threads_ <= 0) threads_ = std::max(1, usable_cores() / o_.nproc_per_node);
    }
    // etcd takes its members, comma-separated; the embedded store has one address.
    const std::vector<std::pair<std::string, int>> endpoints = parse_endpoints(o_.endpoint);
    TESSERA_CHECK(o_.backend == "etcd" || endpoints.size() == 1, "[run] --rdzv-backend store takes one HOST:PORT "
                  "(its host), got '", o_.endpoint, "'; several endpoints are an etcd cluster's members");
    // The listen address routes to the rendezvous: to the first member not on loopback, when the
    // members are spread over machines (a loopback one would make node 0 publish 127.0.0.1).
    auto [host, port] = endpoints.front();
    for (const auto& [member_host, member_port] : endpoints)
      if (dist::detail::resolve_ipv4(member_host, "an --rdzv-endpoint host").rfind("127.", 0) != 0) {
        host = member_host;
        port = member_port;
        break;
      }
    // Where this agent's workers' store listens when it is node 0: loopback for a rendezvous on this
    // machine's loopback, else the interface that reaches the rendezvous (dist/net/interface.h).
    local_addr_ = o_.local_addr.empty() ? dist::detail::listen_address(host, "the --rdzv-endpoint host") : o_.local_addr;
    if (o_.backend == "store") {
      // The first agent to bind the endpoint hosts the store; the others are its clients.
      std::string why_not_host;
      try {
        store_host_ = dist::launcher::start_rendezvous_server(host, port, token_);
        say(o_.stderr_fd, concat("hosting the rendezvous store at ", o_.endpoint));
      } catch (const IoError& e) {
        why_not_host = e.what();
      }
      dist::TcpStoreOptions c;
      c.host = host;
      c.port = static_cast<uint16_t>(port);
      c.token = token_;
      c.timeout = Milliseconds(30000);
      c.connect_timeout = o_.join_timeout;
      try {
        store_ = make_store_rendezvous(std::make_shared<dist::TcpStore>(c), o_.endpoint);
      } catch (const TimeoutError& e) {
        // Nobody hosts it: say why this agent could not either (another socket held the port, the
        // address is not this machine's), which a refused connection alone does not tell.
        if (store_host_) throw;
        throw TimeoutError(concat(e.what(), "; this agent could not host it either: ", why_not_host));
      }
    } else {
      store_ = make_etcd_rendezvous(endpoints, o_.join_timeout);
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
    r.heartbeat_timeout = o_.heartbeat_timeout;  // the rendezvous' waits end, or are reported, on this clock
    r.log_fd = o_.stderr_fd;
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
      // A node that reaches this generation late (it was still leaving the last one) can find that
      // it already ended and node 0 closed its worker store: the next round, not the end of the job
      // (seen in the chaos run, when a replacement agent joined right after a grow).
      try {
        if (rdzv_->generation() != g) return Outcome::kMembershipChanged;
      } catch (const Error&) {
      }
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
    local_failure_ = false;
    WorkerWatchOptions watching;
    watching.heartbeat_timeout = o_.heartbeat_timeout;
    watching.straggler_window = o_.straggler_window;
    watching.stderr_fd = o_.stderr_fd;
    workers_.emplace(m, slots_, worker_store_, watching, result_);
    agents_.emplace(o_.heartbeat_timeout);
    next_beat_ = Clock::now();
    next_window_ = Clock::now() + o_.straggler_window;
    job.on_spawn = [this](int rank, pid_t pid) { workers_->started(rank, pid); };
    // A live job (dist/live_membership.h) keeps its survivors: a lost worker is one of the failures
    // --max-restarts bounds, replaced in its slot while the budget lasts, and the generation goes on.
    job.live_replacements = std::max(0, o_.max_restarts - result_.restarts);
    job.on_live_loss = [this, &m](int rank, int, const std::string& what, pid_t replacement) {
      ++result_.restarts;
      result_.failures.push_back(concat("generation ", m.generation, " (live): ", what));
      if (replacement < 0) workers_->forget(rank);
    };
    job.on_failure = [this, &m](int rank, int status, const std::string& what) {
      // End the generation at once, so the other agents stop their workers while ours stop.
      std::string text = what;
      if (auto stall = workers_->stall_report(rank)) text += " after stalling: " + *stall;
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
      try {
        if (std::optional<std::string> reach = workers_->generation_reach()) rdzv_->set(concat("g", g, "/last_step"), *reach);
        // A generation whose workers finished before a watch saw a step past the resumed one (a
        // short job: ElasticRun.AKilledWorkerRestartsTheJobSmallerAndItFinishes once ended so in
        // 0.2 s) still reports its recovery; generation_reach() has just read rank 0's last step.
        workers_->check_recovery(*rdzv_, reported_);
      } catch (const Error&) {
      }
    }
    workers_.reset();
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
          if (std::optional<std::string> gone = agents_->silent_agent(*rdzv_, m)) {
            say(o_.stderr_fd, *gone);
            rdzv_->end_generation(m.generation, "lost", *gone, static_cast<int>(m.members.size()) - 1);
            return true;
          }
          workers_->check_workers();
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
        workers_->poll_step();
        workers_->check_recovery(*rdzv_, reported_);
        if (static_cast<int>(m.members.size()) < o_.max_nodes) {
          if (int64_t waiting = rdzv_->waiting(m.generation); waiting > 0) {
            rdzv_->end_generation(m.generation, "grow", concat(waiting, " agent(s) waiting to join"),
                                  static_cast<int>(std::min<int64_t>(m.members.size() + waiting, o_.max_nodes)));
            return true;
          }
        }
        if (now >= next_window_) {
          next_window_ = now + o_.straggler_window;
          workers_->check_stragglers();
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
    for (auto& [rank, pid] : workers_->pids())
      if (rank != except_rank) dist::launcher::signal_worker(pid, SIGUSR1);
  }

  void wait_for_members(const Membership& m) {
    AgentHeartbeats agents(o_.heartbeat_timeout);
    // The rendezvous store's host leaves once every member has finished, this one included; a
    // node 0 that does not host it may then find the store gone while it still waits. Having
    // finished itself, it has nothing left to wait for.
    if (!store_host_) {
      try {
        agents.wait_until_finished_or_gone(*rdzv_, m, o_.heartbeat_interval);
      } catch (const Error&) {
      }
      return;
    }
    agents.wait_until_finished_or_gone(*rdzv_, m, o_.heartbeat_interval);
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
  std::optional<WorkerWatch> workers_;     // this generation's workers
  std::optional<AgentHeartbeats> agents_;  // this generation's other agents
  std::set<int64_t> reported_;             // generations whose recovery was reported
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
      const std::string host = text.substr(0, colon);
      if (used == text.size() - colon - 1 && port > 0 && port <= 65535 && host.find_first_of(" \t,") == std::string::npos)
        return {host, port};
    } catch (const std::exception&) {
    }
  }
  throw ValueError("[run] --rdzv-endpoint takes HOST:PORT, got '" + text + "'");
}

std::vector<std::pair<std::string, int>> parse_endpoints(const std::string& text) {
  std::vector<std::pair<std::string, int>> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    try {
      out.push_back(parse_endpoint(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    } catch (const ValueError& e) {
      throw ValueError(std::string(e.what()) + " in '" + text + "' (HOST:PORT, or etcd members as HOST:PORT,HOST:PORT,...)");
    }
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

ElasticResult run_elastic(const ElasticOptions& options) { return Agent(options).run(); }

}  // namespace tessera::elastic
