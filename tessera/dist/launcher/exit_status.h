// Wait statuses (from waitpid) in words and as a shell would report them.
#pragma once
#include <string>

namespace tessera::dist::launcher {

// "exited with status 3", "was killed by signal 9 (SIGKILL)".
std::string describe_wait_status(int status);
// 0 for success; the exit status; 128 + the signal number for a killed process (the shell's rule).
int exit_code_of(int status);
// "SIGKILL"; "signal 42" for one without a name.
std::string signal_name(int signal);

}  // namespace tessera::dist::launcher
