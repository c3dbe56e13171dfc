// Tests that open a thousand sockets hold both ends in this one process, so they need more file
// descriptors than a default `ulimit -n` of 1024 gives.
#pragma once
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tessera::testing {

// Raises the soft RLIMIT_NOFILE to at least `wanted` (never above the hard limit, never lowers it).
// Returns "" when the process may now open `wanted` descriptors, else why not (for GTEST_SKIP).
inline std::string raise_fd_limit(rlim_t wanted) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return std::string("getrlimit(RLIMIT_NOFILE) failed: ") + std::strerror(errno);
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur >= wanted) return "";
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < wanted)
    return "the hard limit on open files is " + std::to_string(lim.rlim_max) + ", below the " + std::to_string(wanted) +
           " this test needs; raise it (ulimit -Hn) to run it";
  lim.rlim_cur = wanted;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0)
    return "setrlimit(RLIMIT_NOFILE, " + std::to_string(wanted) + ") failed: " + std::strerror(errno);
  return "";
}

}  // namespace tessera::testing
