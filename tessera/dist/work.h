// Work: the handle an asynchronous operation returns (c10d's Work). wait() blocks until the
// operation has finished and rethrows its error on the caller's thread, with its type kept
// (TimeoutError, PeerFailureError, ValueError, ...), so recovery code can catch by type.
#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "tessera/core/stream.h"
#include "tessera/dist/call_text.h"
#include "tessera/dist/communicator.h"

namespace tessera::dist {

class Work;

// What runs a queued operation on the thread that waits for it (the process group).
class InlineRunner {
 public:
  virtual ~InlineRunner() = default;
  // Runs the queued operations up to and including `work`'s, if no thread has started them.
  virtual void run_queued_through(const Work* work) = 0;
};

class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}
  // A collective: its description is built from the call's shared text only when asked for.
  Work(CallTextPtr call, uint64_t sequence) : call_(std::move(call)), sequence_(sequence) {}
  // A send or recv: wait() waits on `transfer` until `deadline` (the group's timeout).
  Work(std::string description, std::unique_ptr<PendingTransfer> transfer, Deadline deadline);

  // Blocks until done; rethrows the operation's error. Every operation is already bounded by its
  // group's timeout, so this never waits forever. An operation not started yet runs on this thread
  // (see set_run_inline). An operation on a device stream (completion_event) is done here once it
  // is issued there, and the device's compute stream is then ordered after it, as PyTorch's
  // Work.wait() orders the current stream: what the compute stream runs next sees the result, and
  // the host does not wait for the device.
  void wait();
  // As wait(), ordering `stream` after the operation instead of the compute stream.
  void wait_on(Stream& stream);
  // As wait(), and the host waits for the device too.
  void synchronize();
  // As wait(), but gives up after `timeout`: TimeoutError naming the operation (which keeps
  // running; a later wait() may still succeed).
  void wait(Milliseconds timeout);
  bool is_completed() const { return done_.load(std::memory_order_acquire); }
  // e.g. "allreduce #17 (sum, float32 x 1000)".
  std::string description() const { return call_ ? call_->description(sequence_) : description_; }

  // For the process group's threads; the first call decides how the operation ended.
  void finish(std::exception_ptr error);
  // Where the operation ran on a device backend's stream: the event that stream records at its end
  // (set before finish()). Null for host backends.
  void set_completion_event(std::shared_ptr<Event> event, Device device);
  const std::shared_ptr<Event>& completion_event() const { return completion_event_; }
  // What wait() calls first, before it blocks: the process group runs the operation on the waiting
  // thread if no thread has started it. Not called by wait(timeout), which must return in time.
  // A weak reference: a Work may outlive its group.
  void set_run_inline(std::weak_ptr<InlineRunner> runner) { runner_ = std::move(runner); }
  bool runs_inline() const { return !runner_.expired(); }

 private:
  void wait_until(Deadline deadline);
  // The host's part of wait(): the operation has run (or been issued on its device stream).
  void wait_for_host();

  std::string description_;  // when not a collective's (call_ null)
  CallTextPtr call_;
  uint64_t sequence_ = 0;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  // Set under mu_ (for done_cv_'s waiters), after error_; read without it by is_completed() and by
  // wait()'s fast path (an operation run inline is done when wait() looks: no lock, no sleep).
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::unique_ptr<PendingTransfer> transfer_;  // guarded by mu_; null for collectives
  Deadline transfer_deadline_{};
  std::weak_ptr<InlineRunner> runner_;  // set once, before the Work is shared
  std::shared_ptr<Event> completion_event_;  // set before finish(), read after wait's host part
  Device completion_device_;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace tessera::dist
