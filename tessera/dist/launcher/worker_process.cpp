#include "tessera/dist/launcher/worker_process.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/util/settings.h"

namespace tessera::dist::launcher {

namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

detail::Fd open_or_throw(const char* path, int flags) {
  detail::Fd fd(::open(path, flags | O_CLOEXEC));
  if (!fd.valid()) throw IoError(tessera::detail::concat("[run] cannot open ", path, ": ", std::strerror(errno)));
  return fd;
}

void make_pipe(detail::Fd& read_end, detail::Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw IoError(tessera::detail::concat("[run] pipe2 failed: ", std::strerror(errno)));
  read_end = detail::Fd(fds[0]);
  write_end = detail::Fd(fds[1]);
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the child between fork and execve: async-signal-safe calls only, because the launcher
// may have other threads (OpenMP's, a test runner's) whose locks were copied mid-use.
[[noreturn]] void exec_child(pid_t parent, int stdin_fd, int stdout_fd, int stderr_fd, int error_fd,
                             const char* path, char* const* argv, char* const* envp, const cpu_set_t* cores) {
  // Handlers first: until execve resets them, a signal here would run the launcher's handler and
  // write into its self-pipe, posing as a signal to the launcher.
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGQUIT, SIGPIPE, SIGCHLD}) ::sigaction(s, &action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
  if (::dup2(stdin_fd, 0) < 0 || ::dup2(stdout_fd, 1) < 0 || ::dup2(stderr_fd, 2) < 0) {
    int e = errno;
    [[maybe_unused]] ssize_t n = ::write(error_fd, &e, sizeof e);
    ::_exit(127);
  }
  // A binding that fails (a core gone from the cpuset meanwhile) leaves the worker unbound: slower
  // at worst, never wrong.
  if (cores != nullptr) ::sched_setaffinity(0, sizeof(cpu_set_t), cores);
  ::execve(path, argv, envp);
  int e = errno;
  [[maybe_unused]] ssize_t n = ::write(error_fd, &e, sizeof e);
  ::_exit(127);
}

}  // namespace

std::vector<std::vector<int>> core_binding(int processes, int threads) {
  std::vector<std::vector<int>> out(static_cast<size_t>(std::max(processes, 0)));
  if (!env_flag("TESSERA_BIND_CORES", true)) return out;
  cpu_set_t mask;
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) return out;
  std::vector<int> usable;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) usable.push_back(c);
  // Only a job that fills the mask exactly: a smaller one bound from the mask's first core would
  // share those cores with another such job on the same machine while the rest stayed idle.
  if (processes < 2 || threads < 1 || static_cast<size_t>(processes) * static_cast<size_t>(threads) != usable.size())
    return out;
  for (int p = 0; p < processes; ++p)
    for (int t = 0; t < threads; ++t) out[static_cast<size_t>(p)].push_back(usable[static_cast<size_t>(p * threads + t)]);
  return out;
}

std::string resolve_program(const std::string& program) {
  TESSERA_CHECK(!program.empty(), "[run] no PROGRAM given (usage: tessera run --nproc-per-node N -- PROGRAM ARGS...)");
  if (program.find('/') != std::string::npos) {
    TESSERA_CHECK(is_executable_file(program), "[run] PROGRAM '", program, "' is not an executable file");
    return program;
  }
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  for (;;) {
    size_t end = path.find(':', begin);
    std::string dir = path.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  TESSERA_CHECK(false, "[run] PROGRAM '", program, "' was not found in PATH (", path, ")");
  return {};
}

WorkerProcess spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& environment, const std::vector<int>& cores) {
  // Everything the child needs is prepared here: after fork it may not allocate.
  std::vector<char*> c_argv = c_strings(argv), c_envp = c_strings(environment);
  cpu_set_t core_set;
  CPU_ZERO(&core_set);
  for (int c : cores) CPU_SET(c, &core_set);
  detail::Fd dev_null = open_or_throw("/dev/null", O_RDONLY);
  WorkerProcess worker;
  detail::Fd stdout_write, stderr_write, error_read, error_write;
  make_pipe(worker.stdout_read, stdout_write);
  make_pipe(worker.stderr_read, stderr_write);
  make_pipe(error_read, error_write);

  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw IoError(tessera::detail::concat("[run] fork failed: ", std::strerror(errno)));
  if (pid == 0)
    exec_child(parent, dev_null.get(), stdout_write.get(), stderr_write.get(), error_write.get(), path.c_str(),
               c_argv.data(), c_envp.data(), cores.empty() ? nullptr : &core_set);
  worker.pid = pid;
  // Also from the parent, so the group exists before we might signal it (either call may win).
  ::setpgid(pid, pid);
  stdout_write.reset();
  stderr_write.reset();
  error_write.reset();

  // EOF (0 bytes) means execve succeeded and closed the close-on-exec write end.
  int child_errno = 0;
  ssize_t n;
  do n = ::read(error_read.get(), &child_errno, sizeof child_errno);
  while (n < 0 && errno == EINTR);
  if (n > 0) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    TESSERA_CHECK(false, "[run] cannot execute '", path, "': ", std::strerror(child_errno));
  }
  detail::set_nonblocking(worker.stdout_read.get());
  detail::set_nonblocking(worker.stderr_read.get());
  return worker;
}

void signal_worker(pid_t pid, int signal) {
  if (pid <= 0) return;
  if (::kill(-pid, signal) != 0) ::kill(pid, signal);
}

}  // namespace tessera::dist::launcher
