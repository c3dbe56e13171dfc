// Starts one worker process with its output on pipes, and signals it.
#pragma once
#include <string>
#include <sys/types.h>
#include <vector>

#include "tessera/dist/launcher/fd.h"

namespace tessera::dist::launcher {

struct WorkerProcess {
  pid_t pid = -1;
  detail::Fd stdout_read;  // read ends of the worker's stdout and stderr, non-blocking
  detail::Fd stderr_read;
};

// Finds `program` as execvp would: used as is when it contains a '/', else searched in $PATH.
// ValueError naming the program when there is no such executable.
std::string resolve_program(const std::string& program);

// fork + execve of `path` with `argv` (argv[0] included) and exactly the variables in `environment`
// ("NAME=value"). The worker
//  - leads a process group of its own, so that stopping it also stops what it started (a shell
//    script's children) and a terminal's Ctrl-C reaches only the launcher, which forwards it once;
//  - gets SIGKILL if the launcher dies (PR_SET_PDEATHSIG), so workers never outlive a killed
//    launcher; note the kernel ties this to the *thread* that called spawn_worker;
//  - reads stdin from /dev/null (it is in a background process group, where reading the terminal
//    would stop it), and has SIGINT, SIGTERM, SIGQUIT and SIGPIPE back at their defaults and no
//    signals blocked, whatever the launcher inherited.
//  - runs only on `cores` when that is not empty (its CPU affinity, inherited by its threads).
// Throws ValueError if execve fails (the worker's errno is sent back over a close-on-exec pipe).
WorkerProcess spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& environment, const std::vector<int>& cores = {});

// The cores each of `processes` local processes of `threads` threads each is bound to: consecutive
// slices of this process's affinity mask when they fill it exactly (the default thread count
// does: cores / processes) and TESSERA_BIND_CORES is not 0, else none (empty lists: the scheduler
// places them). Why: with a core per rank and nothing pinned,
// Linux often ran both ranks of a 2-process job on one core and their waking helper threads on the
// other; a 4 KiB shared-memory all-reduce then took 53 us instead of 2.4 us, in about a third of
// the runs (`tessera bench comm`, this 2-core machine). Open MPI binds to cores by default too.
std::vector<std::vector<int>> core_binding(int processes, int threads);

// Sends `signal` to the worker's process group (falling back to the pid alone). Never throws.
void signal_worker(pid_t pid, int signal);

}  // namespace tessera::dist::launcher
