#include "tessera/serve/replica_backend.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/exit_status.h"
#include "tessera/dist/launcher/job_token.h"
#include "tessera/serve/request_codec.h"

extern char** environ;

namespace tessera::serve {

namespace {

using Clock = std::chrono::steady_clock;
using tessera::detail::concat;

std::string self_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw IoError(concat("[serve] cannot find this executable (/proc/self/exe): ", std::strerror(errno)));
  return std::string(buf, static_cast<size_t>(n));
}

// Reads "<port>\n" from the replica's ready pipe within `timeout`; 0 when it closed or timed out.
int read_port(int fd, std::chrono::milliseconds timeout, std::string& why) {
  const auto deadline = Clock::now() + timeout;
  std::string line;
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      why = concat("did not report its port within ", timeout.count(), " ms");
      return 0;
    }
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno != EINTR) {
      why = concat("poll: ", std::strerror(errno));
      return 0;
    }
    if (r <= 0) continue;
    char buf[32];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) {
      why = "exited before it listened (its error is above)";
      return 0;
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      why = concat("read: ", std::strerror(errno));
      return 0;
    }
    line.append(buf, static_cast<size_t>(n));
    if (line.size() > 16) break;
  }
  const int port = std::atoi(line.c_str());
  if (port <= 0 || port > 65535) why = concat("reported a malformed port '", line.substr(0, 16), "'");
  return port > 0 && port <= 65535 ? port : 0;
}

// Rewrites a replica's "tessera_serve_batch_size..." lines into `batch` and its
// "tessera_serve_samples_total" line into `samples`, as tessera_serve_replica_* with a replica label.
void relabel(const std::string& text, int replica, std::string& batch, std::string& samples) {
  size_t pos = 0;
  const std::string label = "replica=\"" + std::to_string(replica) + "\"";
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    for (auto [name, out] : {std::pair{"tessera_serve_batch_size", &batch}, {"tessera_serve_samples_total", &samples}}) {
      if (line.rfind(name, 0) != 0) continue;
      std::string rest = line.substr(std::strlen("tessera_serve_"));
      const size_t brace = rest.find('{'), space = rest.find(' ');
      if (brace != std::string::npos && brace < space) rest.insert(brace + 1, label + ",");
      else if (space != std::string::npos) rest.insert(space, "{" + label + "}");
      *out += "tessera_serve_replica_" + rest + "\n";
    }
  }
}

}  // namespace

// Connections to the replicas are kept open between requests (a new one per request cost a third of
// the throughput at 64 clients): each forward takes an idle client of its replica, or makes one, and
// gives it back afterwards unless it failed. A replica started again (a new port) starts empty.
struct ReplicaBackend::Connections {
  std::mutex mutex;
  std::vector<std::pair<int, std::vector<std::unique_ptr<httplib::Client>>>> idle;  // (port, clients) per replica

  std::unique_ptr<httplib::Client> take(int index, int port) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto& [p, clients] = idle[index];
      if (p != port) {
        clients.clear();
        p = port;
      }
      if (!clients.empty()) {
        auto c = std::move(clients.back());
        clients.pop_back();
        return c;
      }
    }
    return std::make_unique<httplib::Client>("127.0.0.1", port);
  }
  void give_back(int index, int port, std::unique_ptr<httplib::Client> c) {
    std::lock_guard<std::mutex> lock(mutex);
    if (idle[index].first == port && idle[index].second.size() < 256) idle[index].second.push_back(std::move(c));
  }
};

ReplicaBackend::ReplicaBackend(ReplicaOptions options, ServeMetrics& metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      executable_(self_executable()),
      token_(dist::launcher::random_job_token()),
      replicas_(static_cast<size_t>(options_.count)),
      connections_(std::make_unique<Connections>()) {
  TESSERA_CHECK(options_.count >= 1, "[serve] --replicas must be at least 1, got ", options_.count);
  connections_->idle.resize(replicas_.size());
  monitor_ = std::thread([this] { monitor(); });
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return started_; });
  for (size_t i = 0; i < replicas_.size(); ++i)
    if (!replicas_[i].ready) {
      const std::string why = replicas_[i].last_exit;
      lock.unlock();
      stop();
      throw IoError(concat("[serve] replica ", i, " ", why));
    }
}

ReplicaBackend::~ReplicaBackend() { stop(); }

bool ReplicaBackend::spawn(int index) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    replicas_[index].last_exit = concat("could not be started: pipe: ", std::strerror(errno));
    return false;
  }
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<std::string> args = options_.argv;
  args[0] = executable_;
  args.insert(args.end(), {"--ready-fd", "3"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "TESSERA_SERVE_TOKEN=", 20) != 0) env_strings.emplace_back(*e);
  env_strings.push_back("TESSERA_SERVE_TOKEN=" + token_);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // The ready pipe becomes fd 3; every other inherited descriptor (the router's listening and
    // client sockets) is closed, or the router's clients would not see their connections end.
    if (pipe_fds[1] == 3) ::fcntl(3, F_SETFD, 0);
    else ::dup2(pipe_fds[1], 3);
    ::syscall(SYS_close_range, 4u, ~0u, 0u);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the router blocks SIGTERM/SIGHUP for its signal thread
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  if (pid < 0) {
    ::close(pipe_fds[0]);
    std::lock_guard<std::mutex> lock(mutex_);
    replicas_[index].last_exit = concat("could not be started: fork: ", std::strerror(errno));
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    replicas_[index].pid = pid;
  }
  std::string why;
  const int port = read_port(pipe_fds[0], options_.ready_timeout, why);
  ::close(pipe_fds[0]);
  std::lock_guard<std::mutex> lock(mutex_);
  if (port == 0) {
    replicas_[index].last_exit = concat("(pid ", pid, ") ", why);
    ::kill(pid, SIGKILL);  // reaped by the monitor like any other exit
    return false;
  }
  replicas_[index].port = port;
  replicas_[index].ready = true;
  std::fprintf(stderr, "tessera serve: replica %d (pid %d) ready on 127.0.0.1:%d\n", index, static_cast<int>(pid), port);
  changed_.notify_all();
  return true;
}

void ReplicaBackend::monitor() {
  for (int i = 0; i < options_.count; ++i) spawn(i);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    started_ = true;
  }
  changed_.notify_all();
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      // No child left (ECHILD): wait until stop.
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_; });
      break;
    }
    int index = -1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < replicas_.size(); ++i)
        if (replicas_[i].pid == pid) index = static_cast<int>(i);
      if (index < 0) continue;
      Replica& r = replicas_[index];
      r.pid = -1;
      r.ready = false;
      r.last_exit = dist::launcher::describe_wait_status(status);
      if (stopping_) {
        bool any = false;
        for (const auto& x : replicas_) any = any || x.pid > 0;
        changed_.notify_all();
        if (!any) break;
        continue;
      }
      std::fprintf(stderr, "tessera serve: replica %d (pid %d) %s; %s\n", index, static_cast<int>(pid),
                   r.last_exit.c_str(), restarts_ < options_.max_restarts ? "starting it again" : "restart limit reached");
      if (restarts_ >= options_.max_restarts) continue;
      ++restarts_;
    }
    metrics_.replica_restarted();
    spawn(index);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  monitor_done_ = true;
  changed_.notify_all();
}

void ReplicaBackend::stop() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!monitor_.joinable()) return;
  stopping_ = true;
  for (auto& r : replicas_)
    if (r.pid > 0) ::kill(r.pid, SIGTERM);  // each drains what it holds
  changed_.notify_all();
  if (!changed_.wait_for(lock, std::chrono::seconds(15), [&] { return monitor_done_; }))
    for (auto& r : replicas_)
      if (r.pid > 0) ::kill(r.pid, SIGKILL);
  lock.unlock();
  monitor_.join();
}

std::vector<pid_t> ReplicaBackend::pids() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<pid_t> out;
  for (const auto& r : replicas_)
    if (r.ready) out.push_back(r.pid);
  return out;
}

ReplicaBackend::Picked ReplicaBackend::pick(int avoid, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    Picked best;
    int least = 0;
    const size_t n = replicas_.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (next_ + k) % n;
      const Replica& r = replicas_[i];
      if (!r.ready || static_cast<int>(i) == avoid) continue;
      if (best.index < 0 || r.in_flight < least) {
        best = {static_cast<int>(i), r.port};
        least = r.in_flight;
      }
    }
    if (best.index < 0 && avoid >= 0 && replicas_[avoid].ready) best = {avoid, replicas_[avoid].port};
    if (best.index >= 0) {
      ++replicas_[best.index].in_flight;
      next_ = (static_cast<size_t>(best.index) + 1) % n;
      return best;
    }
    if (stopping_ || changed_.wait_until(lock, deadline) == std::cv_status::timeout) return {};
  }
}

Reply ReplicaBackend::forward_to(int index, int port, const char* method, const std::string& path,
                                 const std::string& body, std::string& failure) {
  std::unique_ptr<httplib::Client> client = connections_->take(index, port);
  const auto t = std::chrono::duration_cast<std::chrono::seconds>(options_.forward_timeout).count();
  client->set_connection_timeout(std::max<long long>(1, t), 0);
  client->set_read_timeout(std::max<long long>(1, t), 0);
  client->set_write_timeout(std::max<long long>(1, t), 0);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);  // headers and body go in two writes: Nagle would hold the second for an ACK
  client->set_bearer_token_auth(token_);
  httplib::Result res = std::string(method) == "GET" ? client->Get(path) : client->Post(path, body, "application/json");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --replicas_[index].in_flight;
  }
  if (res) connections_->give_back(index, port, std::move(client));
  if (!res) {
    failure = concat("replica ", index, " (127.0.0.1:", port, ") failed while answering ", path, ": ",
                     httplib::to_string(res.error()));
    return {0, ""};
  }
  return {res->status, res->body};
}

Reply ReplicaBackend::predict(const std::string& body) {
  const auto deadline = Clock::now() + options_.ready_timeout;
  std::string first, second;
  Picked p = pick(-1, deadline);
  if (p.index < 0) return {503, encode_error("[serve] no replica is ready (all are starting again)")};
  Reply r = forward_to(p.index, p.port, "POST", "/v1/predict", body, first);
  if (r.status != 0) return r;
  Picked q = pick(p.index, deadline);  // once more, elsewhere when possible
  if (q.index < 0) return {503, encode_error("[serve] " + first + "; no replica was ready to retry")};
  r = forward_to(q.index, q.port, "POST", "/v1/predict", body, second);
  if (r.status != 0) return r;
  return {503, encode_error("[serve] " + first + "; the retry failed too: " + second)};
}

Reply ReplicaBackend::reload() {
  nlohmann::json done = nlohmann::json::array();
  std::string failures;
  for (int i = 0; i < options_.count; ++i) {
    int port = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!replicas_[i].ready) continue;  // a replica starting again loads the newest anyway
      port = replicas_[i].port;
      ++replicas_[i].in_flight;
    }
    std::string failure;
    Reply r = forward_to(i, port, "POST", "/v1/reload", "", failure);
    if (r.status == 200) done.push_back(nlohmann::json::parse(r.body, nullptr, false));
    else failures += (failures.empty() ? "" : "; ") + (r.status == 0 ? failure : "replica " + std::to_string(i) + ": " + r.body);
  }
  if (!failures.empty()) return {500, encode_error("[serve] reload: " + failures)};
  return {200, nlohmann::json{{"replicas", done}}.dump()};
}

Reply ReplicaBackend::health() {
  std::lock_guard<std::mutex> lock(mutex_);
  int ready = 0;
  for (const auto& r : replicas_) ready += r.ready ? 1 : 0;
  nlohmann::json j{{"status", ready > 0 ? "ok" : "unavailable"}, {"replicas", replicas_.size()}, {"ready", ready},
                   {"restarts", restarts_}};
  return {ready > 0 ? 200 : 503, j.dump()};
}

std::string ReplicaBackend::metrics_extra() {
  std::string batch = "# HELP tessera_serve_replica_batch_size Samples per model run in each replica.\n"
                      "# TYPE tessera_serve_replica_batch_size histogram\n";
  std::string samples = "# HELP tessera_serve_replica_samples_total Samples each replica ran the model on.\n"
                        "# TYPE tessera_serve_replica_samples_total counter\n";
  for (int i = 0; i < options_.count; ++i) {
    int port = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!replicas_[i].ready) continue;
      port = replicas_[i].port;
      ++replicas_[i].in_flight;
    }
    std::string failure;
    Reply r = forward_to(i, port, "GET", "/metrics", "", failure);
    if (r.status == 200) relabel(r.body, i, batch, samples);  // each metric's lines under its own header
  }
  return batch + samples;
}

}  // namespace tessera::serve
