// Set while a blocking form of a collective (blocking_allreduce, ...) issues its operation on this
// thread: its caller waits for it at once, so the executor does not wake the worker thread for it
// (ProcessGroup::enqueue_task). The entry points (process_group_collectives.cpp) set it, the executor
// (process_group.cpp) reads it.
#pragma once

namespace tessera::dist::detail {

inline thread_local bool issuing_blocking = false;

struct BlockingScope {
  BlockingScope() { issuing_blocking = true; }
  ~BlockingScope() { issuing_blocking = false; }
  BlockingScope(const BlockingScope&) = delete;
  BlockingScope& operator=(const BlockingScope&) = delete;
};

}  // namespace tessera::dist::detail
