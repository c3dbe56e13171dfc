#include "tessera/util/thread_priority.h"

#include <algorithm>
#include <cerrno>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tessera {

namespace {
id_t this_thread_id() { return static_cast<id_t>(::syscall(SYS_gettid)); }
}  // namespace

int this_thread_nice() {
  errno = 0;  // -1 is a valid nice value: only errno tells a failure
  const int nice = ::getpriority(PRIO_PROCESS, this_thread_id());
  return errno == 0 ? nice : 0;
}

bool raise_this_thread_priority(int levels) {
  if (levels <= 0) return true;
  const int target = std::max(-20, this_thread_nice() - levels);
  return ::setpriority(PRIO_PROCESS, this_thread_id(), target) == 0;
}

}  // namespace tessera
