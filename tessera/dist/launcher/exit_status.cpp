#include "tessera/dist/launcher/exit_status.h"

#include <csignal>
#include <cstring>
#include <sys/wait.h>

#include "tessera/core/error.h"

namespace tessera::dist::launcher {

std::string signal_name(int signal) {
  // sigabbrev_np is glibc >= 2.32 (Debian 12 has 2.36); it gives "KILL" for SIGKILL.
  if (const char* abbrev = ::sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signal);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return tessera::detail::concat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int signal = WTERMSIG(status);
    return tessera::detail::concat("was killed by signal ", signal, " (", signal_name(signal), ")",
                                   WCOREDUMP(status) ? ", core dumped" : "");
  }
  return tessera::detail::concat("ended with wait status ", status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace tessera::dist::launcher
