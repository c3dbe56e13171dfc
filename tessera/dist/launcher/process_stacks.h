// Every thread's stack of other processes, symbolised, taken from outside: a wedged worker may be
// stopped (SIGSTOP) or blocked where no signal handler of its own would run, so the launcher, its
// parent, attaches to it with eu-stack (elfutils; scripts/setup.sh installs it) or, where that is
// missing, gdb. Attaching stops the process for the few milliseconds the unwind takes and leaves it
// as it was (a stopped process stays stopped). A tool still running at the budget is killed, and a
// worker its attach left stopped is continued (SIGCONT) unless it was stopped before.
#pragma once
#include <chrono>
#include <string>
#include <sys/types.h>
#include <vector>

namespace tessera::dist::launcher {

struct ProcessStacks {
  pid_t pid = -1;
  std::string state;  // /proc/PID/status's State: "S (sleeping)", "T (stopped)", ...; "gone" when it exited
  std::string text;   // the tool's output: a "TID n:" section of "#k 0x... function" frames per thread
  std::string error;  // why there is no text (no tool, the tool failed or ran out of time); "" with text
};

// The stacks of `pids`, the tools running side by side, all of them ended (SIGKILL) at `budget`.
std::vector<ProcessStacks> take_stacks(const std::vector<pid_t>& pids, std::chrono::milliseconds budget);

// /proc/PID/status's State line, "gone" when there is none.
std::string process_state(pid_t pid);
// Whether the process has a handler for `signal` (/proc/PID/status's SigCgt): sending a signal it
// does not catch would end it.
bool catches_signal(pid_t pid, int signal);

// The first `frames` frames of the thread `tid` in `stacks` (eu-stack's text), one per line,
// without addresses: "#0 __futex_abstimed_wait_common\n#1 ...". Empty when that thread is not there
// (and for gdb's text, whose frames are in the file only).
std::string thread_frames(const std::string& stacks, pid_t tid, int frames);

}  // namespace tessera::dist::launcher
