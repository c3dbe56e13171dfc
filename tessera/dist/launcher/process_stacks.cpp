#include "tessera/dist/launcher/process_stacks.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <poll.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/worker_process.h"

extern char** environ;

namespace tessera::dist::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// The command that prints every thread's stack of `pid`: eu-stack, else gdb; empty when neither is
// on the PATH.
std::vector<std::string> stack_command(pid_t pid, std::string& path) {
  const std::string p = std::to_string(pid);
  try {
    path = resolve_program("eu-stack");
    return {"eu-stack", "-p", p, "-n", "64"};
  } catch (const ValueError&) {
  }
  try {
    path = resolve_program("gdb");
    return {"gdb", "-p", p, "-batch", "-nx", "-ex", "thread apply all bt 64"};
  } catch (const ValueError&) {
  }
  return {};
}

struct Running {
  WorkerProcess process;
  std::string output, errors;
  bool finished = false;
};

// Reads what is there; false at EOF.
bool read_into(detail::Fd& fd, std::string& into) {
  char buffer[16384];
  ssize_t n;
  do n = ::read(fd.get(), buffer, sizeof buffer);
  while (n < 0 && errno == EINTR);
  if (n > 0) {
    into.append(buffer, static_cast<size_t>(n));
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  fd.reset();
  return false;
}

bool state_is_stopped(const std::string& state) { return !state.empty() && (state[0] == 'T' || state[0] == 't'); }

}  // namespace

std::string process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("State:", 0) == 0) {
      const size_t start = line.find_first_not_of(" \t", 6);
      return start == std::string::npos ? std::string() : line.substr(start);
    }
  return "gone";
}

bool catches_signal(pid_t pid, int signal) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("SigCgt:", 0) == 0) {
      const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
      return signal >= 1 && signal <= 64 && ((mask >> (signal - 1)) & 1ULL) != 0;
    }
  return false;
}

std::vector<ProcessStacks> take_stacks(const std::vector<pid_t>& pids, std::chrono::milliseconds budget) {
  std::vector<ProcessStacks> out(pids.size());
  std::vector<std::optional<Running>> tools(pids.size());
  std::vector<std::string> environment;
  // Not DEBUGINFOD_URLS: a tool fetching debug information over the network would outlast the budget.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::string(*e).rfind("DEBUGINFOD_URLS=", 0) != 0) environment.emplace_back(*e);
  for (size_t i = 0; i < pids.size(); ++i) {
    out[i].pid = pids[i];
    out[i].state = process_state(pids[i]);
    std::string path;
    const std::vector<std::string> command = stack_command(pids[i], path);
    if (command.empty()) {
      out[i].error = "no stack tool: install elfutils (eu-stack) or gdb";
      continue;
    }
    try {
      tools[i].emplace(Running{spawn_worker(path, command, environment), {}, {}, false});
    } catch (const Error& e) {
      out[i].error = e.what();
    }
  }
  const Clock::time_point deadline = Clock::now() + budget;
  while (true) {  // every read bounded by the deadline; the tools end at EOF
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, bool>> owners;  // tool index, stdout (else stderr)
    for (size_t i = 0; i < tools.size(); ++i) {
      if (!tools[i]) continue;
      for (bool is_out : {true, false}) {
        detail::Fd& fd = is_out ? tools[i]->process.stdout_read : tools[i]->process.stderr_read;
        if (fd.valid()) {
          fds.push_back({fd.get(), POLLIN, 0});
          owners.emplace_back(i, is_out);
        }
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (fds.empty() || left <= 0) break;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left)) <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Running& tool = *tools[owners[k].first];
      if (owners[k].second) read_into(tool.process.stdout_read, tool.output);
      else read_into(tool.process.stderr_read, tool.errors);
    }
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    if (!tools[i]) continue;
    Running& tool = *tools[i];
    bool timed_out = tool.process.stdout_read.valid() || tool.process.stderr_read.valid();
    // A tool that closed its output exits at once; one that has not by the deadline is killed
    // (SIGKILL cannot be ignored, so the blocking wait after it is bounded).
    while (!timed_out && ::waitpid(tool.process.pid, nullptr, WNOHANG) == 0) {
      if (Clock::now() >= deadline + std::chrono::milliseconds(500)) {
        timed_out = true;
        break;
      }
      ::usleep(5000);
    }
    if (timed_out) {
      signal_worker(tool.process.pid, SIGKILL);
      while (::waitpid(tool.process.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      // A tracer that dies while the worker sits in its attach stop leaves that SIGSTOP pending
      // (ptrace(2)): a worker that was not stopped before must not be left stopped by us.
      if (!state_is_stopped(out[i].state) && state_is_stopped(process_state(pids[i]))) ::kill(pids[i], SIGCONT);
    }
    out[i].text = std::move(tool.output);
    if (timed_out) {
      out[i].error = "the stack tool did not finish within " + std::to_string(budget.count()) + " ms";
    } else if (out[i].text.empty()) {
      out[i].error = tool.errors.empty() ? "the stack tool printed nothing" : tool.errors.substr(0, 400);
    }
  }
  return out;
}

std::string thread_frames(const std::string& stacks, pid_t tid, int frames) {
  std::istringstream in(stacks);
  const std::string header = "TID " + std::to_string(tid) + ":";
  std::string line, out;
  bool inside = false;
  int taken = 0;
  while (std::getline(in, line) && taken < frames) {
    if (!inside) {
      inside = line == header;
      continue;
    }
    if (line.rfind("TID ", 0) == 0) break;
    if (line.rfind("#", 0) != 0) continue;
    // "#3  0x00007f... function": keep the number and the function.
    std::istringstream fields(line);
    std::string number, address, function;
    fields >> number >> address;
    std::getline(fields, function);
    const size_t start = function.find_first_not_of(' ');
    out += number + " " + (start == std::string::npos ? "??" : function.substr(start)) + "\n";
    ++taken;
  }
  return out;
}

}  // namespace tessera::dist::launcher
