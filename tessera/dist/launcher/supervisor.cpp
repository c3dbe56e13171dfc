#include "tessera/dist/launcher/supervisor.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/exit_status.h"
#include "tessera/dist/launcher/line_prefixer.h"
#include "tessera/dist/launcher/signal_pipe.h"
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

struct Worker {
  int rank;
  pid_t pid;
  Stream out, err;
  std::optional<int> status;
  bool sigkilled = false;
  bool running() const { return !status.has_value(); }
};

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string plural(int n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

std::string seconds_text(milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

// This process's environment with the contract's variables put in (replacing any inherited ones).
std::vector<std::string> environment_for(const WorkerEnv& env) {
  std::map<std::string, std::string> contract = to_variables(env);
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    if (!contract.count(entry.substr(0, entry.find('=')))) out.push_back(std::move(entry));
  }
  for (const auto& [name, value] : contract) out.push_back(name + "=" + value);
  return out;
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& job) : job_(job), buffer_(kReadChunk) {}

  LaunchResult run(const std::vector<WorkerEnv>& envs) {
    // Handlers go in before the first fork, so that no SIGINT or SIGCHLD falls between them.
    SignalPipe signals;
    spawn_all(envs);
    if (job_.timeout.count() > 0) job_deadline_ = Clock::now() + job_.timeout;
    while (running_count() > 0) {
      wait_for_events(signals);
      for (int s : signals.take())
        if (s == SIGINT || s == SIGTERM) forward(s);
      reap();
      check_deadlines();
    }
    return result();
  }

 private:
  void spawn_all(const std::vector<WorkerEnv>& envs) {
    std::string path = resolve_program(job_.command.front());
    try {
      for (const WorkerEnv& env : envs) {
        WorkerProcess p = spawn_worker(path, job_.command, environment_for(env));
        std::string prefix = "[rank " + std::to_string(env.rank) + "] ";
        workers_.push_back(Worker{env.rank, p.pid, Stream{std::move(p.stdout_read), LinePrefixer(prefix, job_.stdout_fd)},
                                  Stream{std::move(p.stderr_read), LinePrefixer(prefix, job_.stderr_fd)}, {}, false});
      }
    } catch (...) {
      // Those already started must not outlive the error: kill and reap them (SIGKILL cannot be
      // ignored, so the blocking waitpid is bounded).
      for (Worker& w : workers_) {
        signal_worker(w.pid, SIGKILL);
        while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
      }
      throw;
    }
  }

  void wait_for_events(const SignalPipe& signals) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    std::vector<Stream*> streams;
    for (Worker& w : workers_)
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
    auto left = std::chrono::ceil<milliseconds>(wake - Clock::now());
    return std::max(left, milliseconds(0));
  }

  void reap() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (!w.running()) continue;
      int status = 0;
      pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      // ECHILD: someone else reaped it (a SIGCHLD set to SIG_IGN elsewhere); its status is lost.
      w.status = r > 0 ? status : W_EXITCODE(255, 0);
      w.out.drain(buffer_.data());
      w.err.drain(buffer_.data());
      if (!succeeded(*w.status) && !stopping() && received_signal_ == 0) {
        failed_ = static_cast<int>(i);
        stopped_on_failure_ = running_count();
        stop();
      }
    }
  }

  // SIGTERM to every running worker, SIGKILL after the grace period (check_deadlines).
  void stop() {
    for (Worker& w : workers_)
      if (w.running()) signal_worker(w.pid, SIGTERM);
    stop_deadline_ = Clock::now() + job_.grace_period;
  }
  bool stopping() const { return stop_deadline_.has_value(); }

  void forward(int signal) {
    if (received_signal_ == 0) {
      received_signal_ = signal;
      forwarded_to_ = running_count();
    }
    for (Worker& w : workers_)
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
      for (Worker& w : workers_)
        if (w.running()) {
          signal_worker(w.pid, SIGKILL);
          w.sigkilled = true;
          ++sigkilled_;
        }
    }
  }

  int running_count() const {
    int n = 0;
    for (const Worker& w : workers_) n += w.running();
    return n;
  }

  LaunchResult result() const {
    LaunchResult r;
    for (const Worker& w : workers_) r.workers.push_back({w.rank, w.pid, *w.status, w.sigkilled});
    std::string escalation = sigkilled_ == 0 ? std::string()
                                             : "; " + plural(sigkilled_, "worker") + " did not exit within " +
                                                   seconds_text(job_.grace_period) + " and got SIGKILL";
    if (failed_ >= 0) {
      const Worker& w = workers_[failed_];
      r.failed_rank = w.rank;
      r.exit_code = exit_code_of(*w.status);
      r.message = tessera::detail::concat("rank ", w.rank, " (pid ", w.pid, ") ", describe_wait_status(*w.status));
      if (stopped_on_failure_ > 0) r.message += "; stopped the other " + plural(stopped_on_failure_, "worker");
      r.message += escalation;
    } else if (timed_out_) {
      r.timed_out = true;
      r.exit_code = 124;  // as timeout(1)
      r.message = "timed out after " + seconds_text(job_.timeout) + "; stopped " + plural(stopped_on_timeout_, "worker") +
                  escalation;
    } else if (received_signal_ != 0) {
      r.received_signal = received_signal_;
      r.exit_code = 128 + received_signal_;
      r.message = "received " + signal_name(received_signal_) + " and forwarded it to " + plural(forwarded_to_, "worker");
      for (const Worker& w : workers_)
        if (!succeeded(*w.status)) {
          r.message += tessera::detail::concat("; rank ", w.rank, " (pid ", w.pid, ") ", describe_wait_status(*w.status));
          break;
        }
      r.message += escalation;
    }
    return r;
  }

  const LaunchOptions& job_;
  std::vector<char> buffer_;
  std::vector<Worker> workers_;
  std::optional<Clock::time_point> job_deadline_, stop_deadline_;
  bool escalated_ = false, timed_out_ = false;
  int failed_ = -1, stopped_on_failure_ = 0, stopped_on_timeout_ = 0;
  int received_signal_ = 0, forwarded_to_ = 0, sigkilled_ = 0;
};

}  // namespace

LaunchResult supervise(const LaunchOptions& job, const std::vector<WorkerEnv>& envs) {
  return Supervisor(job).run(envs);
}

}  // namespace tessera::dist::launcher::detail
