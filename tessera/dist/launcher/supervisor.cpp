#include "tessera/dist/launcher/supervisor.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/exit_status.h"
#include "tessera/dist/launcher/line_prefixer.h"
#include "tessera/dist/launcher/signal_pipe.h"
#include "tessera/dist/launcher/wedge_watch.h"
#include "tessera/dist/launcher/worker_process.h"

extern char** environ;

namespace tessera::dist::launcher::detail {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Wake at least this often even without events: a safety net only, SIGCHLD and deadlines drive
// the loop.
constexpr milliseconds kTick{1000};
constexpr size_t kReadChunk = 64 * 1024;
// After a worker exits, what it wrote is already in the pipe; read at most this much more, in
// case a process it left behind keeps writing.
constexpr int kMaxDrainChunks = 16;

struct Stream {
  Fd fd;
  LinePrefixer prefixer;

  // Reads once; returns false at EOF or error (the stream is then finished and closed).
  bool read_some(char* buffer) {
    ssize_t n;
    do n = ::read(fd.get(), buffer, kReadChunk);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
      prefixer.write(buffer, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    close();
    return false;
  }
  void drain(char* buffer) {
    for (int i = 0; i < kMaxDrainChunks && fd.valid(); ++i) {
      ssize_t n;
      do n = ::read(fd.get(), buffer, kReadChunk);
      while (n < 0 && errno == EINTR);
      if (n <= 0) break;
      prefixer.write(buffer, static_cast<size_t>(n));
    }
    close();
  }
  void close() {
    prefixer.finish();
    fd.reset();
  }
};

struct Process {
  bool server;
  int rank;  // a worker's global rank; a server's server rank
  pid_t pid;
  Stream out, err;
  std::optional<int> status;
  bool sigkilled = false;
  bool running() const { return !status.has_value(); }
  // "rank 2" or "server 0", as in the output prefixes.
  std::string name() const { return (server ? "server " : "rank ") + std::to_string(rank); }
};

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// "1 worker", "3 workers", "2 processes".
std::string plural(int n, const std::string& noun) {
  if (n == 1) return "1 " + noun;
  return std::to_string(n) + " " + noun + (noun.back() == 's' ? "es" : "s");
}

std::string seconds_text(milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

// This process's environment without any inherited contract variable (a server must not inherit
// RANK, nor a plain job's worker TESSERA_ROLE), with the process's own put in. OMP_NUM_THREADS is
// set to TESSERA_NUM_THREADS unless the launcher's environment has it (torchrun sets it too): a
// program that never reads TESSERA_NUM_THREADS (a user's own, or examples/cpp's) would otherwise run
// an OpenMP team of every core in each of N workers. Two such ranks on this machine's two cores ran
// the MIL-NCE example 8x slower than with one thread each.
std::vector<std::string> environment_for(const std::map<std::string, std::string>& contract) {
  std::vector<std::string> out;
  bool omp_set = false;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    const std::string_view name = std::string_view(entry).substr(0, entry.find('='));
    omp_set = omp_set || name == "OMP_NUM_THREADS";
    if (!is_contract_variable(name)) out.push_back(std::move(entry));
  }
  for (const auto& [name, value] : contract) out.push_back(name + "=" + value);
  if (auto threads = contract.find("TESSERA_NUM_THREADS"); threads != contract.end() && !omp_set)
    out.push_back("OMP_NUM_THREADS=" + threads->second);
  return out;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a notice is not worth failing the job over
    done += static_cast<size_t>(n);
  }
}

// The directory of this launcher's progress files and reports: ${TMPDIR:-/tmp}/tessera-job-<pid>,
// a name `tessera trace stacks PID` can find. Empty (no wedge watch) when it cannot be made ours.
std::string make_job_dir() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tessera-job-" +
                          std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return std::string();
  struct stat st {};
  // One left by a launcher of the same pid is reused; anyone else's, or a link, is not.
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0)
    return std::string();
  return dir;
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& job)
      : job_(job), ps_job_(job.servers_per_node > 0), noun_(ps_job_ ? "process" : "worker"), buffer_(kReadChunk) {}

  LaunchResult run(const std::vector<ProcessSpec>& given) {
    // Handlers go in before the first fork, so that no SIGINT or SIGCHLD falls between them.
    SignalPipe signals;
    std::vector<ProcessSpec> specs = given;
    start_wedge_watch(specs);
    // However this ends (a spawn that failed throws), the progress files and the directory go.
    struct EndWatch {
      Supervisor* s;
      ~EndWatch() { s->end_wedge_watch(); }
    } end_watch{this};
    spawn_all(specs);
    if (wedge_)
      for (const Process& w : processes_)
        if (!w.server) wedge_->watch({w.rank, w.pid, progress_file(w.rank)});
    if (job_.timeout.count() > 0) job_deadline_ = Clock::now() + job_.timeout;
    while (running_count() > 0) {
      wait_for_events(signals);
      for (int s : signals.take()) {
        if (s == SIGINT || s == SIGTERM) forward(s);
        if (s == SIGUSR2 && wedge_) wedge_->ask(tessera::detail::concat("asked for (SIGUSR2 to the launcher, pid ", ::getpid(), ")"));
      }
      reap();
      check_watch();
      check_wedge();
      check_deadlines();
    }
    return result();
  }

  // Workers of a trainer write their progress where the watch reads it (progress_file.h).
  void start_wedge_watch(std::vector<ProcessSpec>& specs) {
    const WedgeOptions options = WedgeOptions::from_environment();
    if (!job_.watch_wedges || options.factor <= 0) return;
    job_dir_ = make_job_dir();
    if (job_dir_.empty()) {
      write_all(job_.stderr_fd, "tessera run: no private job directory in $TMPDIR; the wedge watch is off\n");
      return;
    }
    wedge_ = std::make_unique<WedgeWatch>(options, job_dir_, job_.stderr_fd);
    for (ProcessSpec& spec : specs) {
      if (spec.server) continue;
      ::unlink(progress_file(spec.rank).c_str());  // a former launcher's of this pid
      spec.variables[kProgressFileVariable] = progress_file(spec.rank);
      spec.variables[kLauncherPidVariable] = std::to_string(::getpid());
    }
  }
  std::string progress_file(int rank) const { return job_dir_ + "/rank-" + std::to_string(rank) + ".progress"; }

  void check_wedge() {
    if (!wedge_ || stopping() || Clock::now() < next_wedge_poll_) return;
    next_wedge_poll_ = Clock::now() + WedgeWatch::kInterval;
    wedge_->poll();
  }

  // The progress files and the newest report go; the job directory with them, unless a report's
  // stacks are in it (a job without flight records).
  void end_wedge_watch() {
    wedge_.reset();  // waits for a report in the making
    if (job_dir_.empty()) return;
    for (const Process& w : processes_) ::unlink(progress_file(w.rank).c_str());
    ::unlink((job_dir_ + "/report.txt").c_str());
    ::rmdir(job_dir_.c_str());
  }

  // The elastic agent's hook runs every watch_interval even while stopping (its heartbeats must go
  // on), but can stop the workers only once.
  void check_watch() {
    if (!job_.watch || Clock::now() < next_watch_) return;
    next_watch_ = Clock::now() + job_.watch_interval;
    if (job_.watch() && !stopping() && received_signal_ == 0) {
      interrupted_ = true;
      stopped_on_interrupt_ = running_count();
      stop();
    }
  }

 private:
  void spawn_all(const std::vector<ProcessSpec>& specs) {
    program_ = resolve_program(job_.command.front());
    const std::vector<std::vector<int>> cores =
        core_binding(static_cast<int>(specs.size()), std::max(1, job_.threads_per_worker));
    replacements_left_ = job_.live_replacements;
    try {
      for (size_t k = 0; k < specs.size(); ++k) {
        if (!specs[k].server) {
          spec_of_rank_[specs[k].rank] = specs[k];
          cores_of_rank_[specs[k].rank] = cores[k];
        }
        spawn_one(specs[k], cores[k]);
      }
    } catch (...) {
      // Those already started must not outlive the error: kill and reap them (SIGKILL cannot be
      // ignored, so the blocking waitpid is bounded).
      for (Process& w : processes_) {
        signal_worker(w.pid, SIGKILL);
        while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
      }
      throw;
    }
  }

  pid_t spawn_one(const ProcessSpec& spec, const std::vector<int>& cores) {
    WorkerProcess p = spawn_worker(program_, job_.command, environment_for(spec.variables), cores);
    std::string prefix = std::string(spec.server ? "[server " : "[rank ") + std::to_string(spec.rank) + "] ";
    processes_.push_back(Process{spec.server, spec.rank, p.pid,
                                 Stream{std::move(p.stdout_read), LinePrefixer(prefix, job_.stdout_fd)},
                                 Stream{std::move(p.stderr_read), LinePrefixer(prefix, job_.stderr_fd)},
                                 {}, false});
    if (job_.on_spawn) job_.on_spawn(spec.rank, p.pid);
    return p.pid;
  }

  void wait_for_events(const SignalPipe& signals) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    std::vector<Stream*> streams;
    for (Process& w : processes_)
      for (Stream* s : {&w.out, &w.err})
        if (s->fd.valid()) {
          fds.push_back({s->fd.get(), POLLIN, 0});
          streams.push_back(s);
        }
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(poll_timeout().count()));
    if (ready <= 0) return;  // timeout, or EINTR (the signal is in the pipe)
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) streams[i - 1]->read_some(buffer_.data());
  }

  milliseconds poll_timeout() const {
    Clock::time_point wake = Clock::now() + kTick;
    if (stop_deadline_ && !escalated_) wake = std::min(wake, *stop_deadline_);
    if (job_deadline_ && !stopping()) wake = std::min(wake, *job_deadline_);
    if (job_.watch) wake = std::min(wake, next_watch_);
    if (wedge_ && !stopping()) wake = std::min(wake, next_wedge_poll_);
    auto left = std::chrono::ceil<milliseconds>(wake - Clock::now());
    return std::max(left, milliseconds(0));
  }

  void reap() {
    for (size_t i = 0; i < processes_.size(); ++i) {
      Process& w = processes_[i];
      if (!w.running()) continue;
      int status = 0;
      pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      // ECHILD: someone else reaped it (a SIGCHLD set to SIG_IGN elsewhere); its status is lost.
      w.status = r > 0 ? status : W_EXITCODE(255, 0);
      if (wedge_) wedge_->forget(w.pid);  // its pid may be another process's from now on
      w.out.drain(buffer_.data());
      w.err.drain(buffer_.data());
      if (succeeded(*w.status) || stopping() || received_signal_ != 0) continue;
      if (ps_job_ && !w.server) {
        go_on_without(w);
        continue;
      }
      if (runs_live(w)) {
        lose_live_worker(i);
        continue;
      }
      failed_ = static_cast<int>(i);
      stopped_on_failure_ = running_count();
      stop();
      if (job_.on_failure)
        job_.on_failure(w.rank, *w.status, tessera::detail::concat(w.name(), " (pid ", w.pid, ") ", describe_wait_status(*w.status)));
    }
  }

  // A parameter-server job's failed worker: say so at once (the job may run for hours more) and
  // leave it to the servers whether they can go on.
  void go_on_without(const Process& w) {
    failed_workers_.push_back(w.rank);
    write_all(job_.stderr_fd, tessera::detail::concat("tessera run: worker rank ", w.rank, " (pid ", w.pid, ") ",
                                                      describe_wait_status(*w.status),
                                                      "; a parameter-server job goes on without it\n"));
  }

  // Whether a lost worker belongs to a live job that goes on without it: its last progress record
  // said so, and on this node a peer still runs or a replacement may start (one worker per node:
  // the peers are elsewhere).
  bool runs_live(const Process& w) const {
    if (w.server || job_dir_.empty() || (running_count() == 0 && replacements_left_ == 0)) return false;
    // A configuration or input error would repeat in a replacement: it fails the job as ever.
    if (WIFEXITED(*w.status) && WEXITSTATUS(*w.status) == kConfigErrorExitStatus) return false;
    // Nor can the job go on where the worker found part of its state lost.
    if (WIFEXITED(*w.status) && WEXITSTATUS(*w.status) == kLiveStateLostExitStatus) return false;
    // A replacement may be lost before its first record: its slot is a live job's already.
    if (live_slots_.count(w.rank)) return true;
    const std::optional<ProgressRecord> record = read_progress_file(progress_file(w.rank));
    return record && record->live;
  }

  // A live job's lost worker: its peers form a group without it (dist/live_membership.h); a
  // replacement in its slot, while they last, joins them at a step boundary.
  void lose_live_worker(size_t index) {
    // Copied first: starting the replacement grows processes_.
    const int rank = processes_[index].rank;
    const int status = *processes_[index].status;
    const std::string what = tessera::detail::concat(processes_[index].name(), " (pid ", processes_[index].pid, ") ",
                                                     describe_wait_status(status));
    failed_workers_.push_back(rank);
    live_slots_.insert(rank);
    pid_t replacement = -1;
    if (replacements_left_ > 0) {
      --replacements_left_;
      ::unlink(progress_file(rank).c_str());  // the replacement writes its own
      ProcessSpec spec = spec_of_rank_.at(rank);
      spec.variables[kLiveJoinerVariable] = "1";
      try {
        replacement = spawn_one(spec, cores_of_rank_.at(rank));
        if (wedge_) wedge_->watch({rank, replacement, progress_file(rank)});
      } catch (const std::exception& e) {  // (fork or exec failing now): the job goes on without it
        write_all(job_.stderr_fd, tessera::detail::concat("tessera run: could not start a replacement for ", what,
                                                          ": ", e.what(), "\n"));
      }
    }
    write_all(job_.stderr_fd,
              tessera::detail::concat("tessera run: ", what, "; live membership: its peers go on without it",
                                      replacement > 0 ? tessera::detail::concat("; started a replacement (pid ", replacement,
                                                                                ") that joins the running job")
                                                      : std::string(),
                                      "\n"));
    if (job_.on_live_loss) job_.on_live_loss(rank, status, what, replacement);
  }

  // SIGTERM to every running process, SIGKILL after the grace period (check_deadlines).
  void stop() {
    for (Process& w : processes_)
      if (w.running()) signal_worker(w.pid, SIGTERM);
    stop_deadline_ = Clock::now() + job_.grace_period;
  }
  bool stopping() const { return stop_deadline_.has_value(); }

  void forward(int signal) {
    if (received_signal_ == 0) {
      received_signal_ = signal;
      forwarded_to_ = running_count();
    }
    for (Process& w : processes_)
      if (w.running()) signal_worker(w.pid, signal);
    if (!stopping()) stop_deadline_ = Clock::now() + job_.grace_period;
  }

  void check_deadlines() {
    Clock::time_point now = Clock::now();
    if (job_deadline_ && !stopping() && now >= *job_deadline_) {
      timed_out_ = true;
      stopped_on_timeout_ = running_count();
      stop();
    }
    if (stop_deadline_ && !escalated_ && now >= *stop_deadline_) {
      escalated_ = true;
      for (Process& w : processes_)
        if (w.running()) {
          signal_worker(w.pid, SIGKILL);
          w.sigkilled = true;
          ++sigkilled_;
        }
    }
  }

  int running_count() const {
    int n = 0;
    for (const Process& w : processes_) n += w.running();
    return n;
  }

  LaunchResult result() const {
    LaunchResult r;
    for (const Process& w : processes_)
      (w.server ? r.servers : r.workers).push_back({w.rank, w.pid, *w.status, w.sigkilled, w.server});
    r.failed_workers = failed_workers_;
    std::string escalation = sigkilled_ == 0 ? std::string()
                                             : "; " + plural(sigkilled_, noun_) + " did not exit within " +
                                                   seconds_text(job_.grace_period) + " and got SIGKILL";
    if (failed_ >= 0) {
      const Process& w = processes_[failed_];
      r.failed_rank = w.rank;
      if (w.server) r.failed_server = w.rank;
      r.exit_code = exit_code_of(*w.status);
      r.message = tessera::detail::concat(w.name(), " (pid ", w.pid, ") ", describe_wait_status(*w.status));
      if (stopped_on_failure_ > 0) r.message += "; stopped the other " + plural(stopped_on_failure_, noun_);
      r.message += escalation;
    } else if (interrupted_) {
      r.interrupted = true;
      r.exit_code = 1;
      r.message = "stopped " + plural(stopped_on_interrupt_, noun_) + " for the elastic agent" + escalation;
    } else if (timed_out_) {
      r.timed_out = true;
      r.exit_code = 124;  // as timeout(1)
      r.message = "timed out after " + seconds_text(job_.timeout) + "; stopped " + plural(stopped_on_timeout_, noun_) +
                  escalation;
    } else if (received_signal_ != 0) {
      r.received_signal = received_signal_;
      r.exit_code = 128 + received_signal_;
      r.message = "received " + signal_name(received_signal_) + " and forwarded it to " + plural(forwarded_to_, noun_);
      for (const Process& w : processes_)
        if (!succeeded(*w.status)) {
          r.message += tessera::detail::concat("; ", w.name(), " (pid ", w.pid, ") ", describe_wait_status(*w.status));
          break;
        }
      r.message += escalation;
    } else if (!failed_workers_.empty() && every_worker_failed()) {
      // Only a PS job gets here: its servers outlived the workers, and no worker finished.
      const Process& first = worker_of_rank(failed_workers_.front());
      r.exit_code = exit_code_of(*first.status);
      int failed = static_cast<int>(failed_workers_.size());
      r.message = tessera::detail::concat("every worker failed (", plural(failed, "worker"), "); the first, rank ",
                                          first.rank, " (pid ", first.pid, ") ", describe_wait_status(*first.status));
    }
    return r;
  }

  bool every_worker_failed() const {
    for (const Process& w : processes_)
      if (!w.server && succeeded(*w.status)) return false;
    return true;
  }

  const Process& worker_of_rank(int rank) const {
    for (const Process& w : processes_)
      if (!w.server && w.rank == rank) return w;
    TESSERA_ASSERT(false, "[run] no worker of rank ", rank);
    return processes_.front();
  }

  const LaunchOptions& job_;
  const bool ps_job_;
  const std::string noun_;  // what the messages count: "worker", or "process" in a PS job
  std::vector<char> buffer_;
  std::vector<Process> processes_;  // servers first, then workers, as spawned
  std::vector<int> failed_workers_;
  std::string program_;  // the resolved PROGRAM
  // What each worker rank was started with, for a live job's replacements.
  std::map<int, ProcessSpec> spec_of_rank_;
  std::map<int, std::vector<int>> cores_of_rank_;
  int replacements_left_ = 0;
  std::set<int> live_slots_;  // ranks whose worker a live job lost (and may have replaced)
  std::optional<Clock::time_point> job_deadline_, stop_deadline_;
  bool escalated_ = false, timed_out_ = false, interrupted_ = false;
  int stopped_on_interrupt_ = 0;
  Clock::time_point next_watch_{};
  std::string job_dir_;                 // empty: no wedge watch
  std::unique_ptr<WedgeWatch> wedge_;
  Clock::time_point next_wedge_poll_{};
  int failed_ = -1, stopped_on_failure_ = 0, stopped_on_timeout_ = 0;
  int received_signal_ = 0, forwarded_to_ = 0, sigkilled_ = 0;
};

}  // namespace

LaunchResult supervise(const LaunchOptions& job, const std::vector<ProcessSpec>& processes) {
  return Supervisor(job).run(processes);
}

}  // namespace tessera::dist::launcher::detail
