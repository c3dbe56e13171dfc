#include "tessera/dist/work.h"

#include "tessera/core/error.h"

namespace tessera::dist {

Work::Work(std::string description, std::unique_ptr<PendingTransfer> transfer, Deadline deadline)
    : description_(std::move(description)), transfer_(std::move(transfer)), transfer_deadline_(deadline) {}

void Work::wait() {
  wait_for_host();
  if (completion_event_) current_stream(completion_device_).wait(*completion_event_);
}

void Work::wait_on(Stream& stream) {
  wait_for_host();
  if (completion_event_) stream.wait(*completion_event_);
}

void Work::synchronize() {
  wait_for_host();
  if (completion_event_) completion_event_->synchronize();
}

void Work::set_completion_event(std::shared_ptr<Event> event, Device device) {
  completion_event_ = std::move(event);
  completion_device_ = device;
}

void Work::wait_for_host() {
  if (!is_completed()) {
    if (auto runner = runner_.lock()) runner->run_queued_through(this);
  }
  // done_ is set after error_ and never cleared, and a transfer's Work is done only once its
  // transfer has been waited for: nothing is left to do but report.
  if (is_completed()) {
    if (error_) std::rethrow_exception(error_);
    return;
  }
  wait_until(Deadline::max());
}

void Work::wait(Milliseconds timeout) {
  wait_until(detail::deadline_after(timeout));
  if (completion_event_) current_stream(completion_device_).wait(*completion_event_);
}

void Work::wait_until(Deadline deadline) {
  std::unique_lock lock(mu_);
  if (transfer_ && !done_) {
    // A point-to-point transfer completes on the waiting thread: the backend's own wait is bounded
    // by the group's timeout or the caller's, whichever comes first. Holding mu_ makes concurrent
    // waiters queue behind the first.
    // A backend cannot resume a timed-out wait, so a transfer whose wait failed stays failed.
    std::exception_ptr error;
    try {
      transfer_->wait(std::min(deadline, transfer_deadline_));
    } catch (...) {
      error = std::current_exception();
    }
    error_ = error;
    done_.store(true, std::memory_order_release);
    transfer_.reset();
    done_cv_.notify_all();
  }
  if (!done_cv_.wait_until(lock, deadline, [&] { return done_.load(std::memory_order_acquire); })) {
    throw TimeoutError(tessera::detail::concat("[", description(), "] Work::wait timed out; the operation is still running"));
  }
  if (error_) std::rethrow_exception(error_);
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;  // the collective check failed it first; the backend's late end changes nothing
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
}

}  // namespace tessera::dist
