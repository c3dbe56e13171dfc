// Work: the handle an asynchronous operation returns (c10d's Work). wait() blocks until the
// operation has finished and rethrows its error on the caller's thread, with its type kept
// (TimeoutError, PeerFailureError, ValueError, ...), so recovery code can catch by type.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "tessera/dist/communicator.h"

namespace tessera::dist {

class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}
  // A send or recv: wait() waits on `transfer` until `deadline` (the group's timeout).
  Work(std::string description, std::unique_ptr<PendingTransfer> transfer, Deadline deadline);

  // Blocks until done; rethrows the operation's error. Every operation is already bounded by its
  // group's timeout, so this never waits forever. An operation not started yet runs on this thread
  // (see set_run_inline).
  void wait();
  // As wait(), but gives up after `timeout`: TimeoutError naming the operation (which keeps
  // running; a later wait() may still succeed).
  void wait(Milliseconds timeout);
  bool is_completed() const;
  // e.g. "allreduce #17 (sum, float32 x 1000)".
  const std::string& description() const { return description_; }

  // For the process group's threads; the first call decides how the operation ended.
  void finish(std::exception_ptr error);
  // What wait() calls first, before it blocks: the process group runs the operation on the waiting
  // thread if no thread has started it. Not called by wait(timeout), which must return in time.
  void set_run_inline(std::function<void()> run) { run_inline_ = std::move(run); }
  bool runs_inline() const { return static_cast<bool>(run_inline_); }

 private:
  void wait_until(Deadline deadline);

  std::string description_;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::unique_ptr<PendingTransfer> transfer_;  // guarded by mu_; null for collectives
  Deadline transfer_deadline_{};
  std::function<void()> run_inline_;  // set once, before the Work is shared
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace tessera::dist
