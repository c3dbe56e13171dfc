#include "tessera/dist/backends/gloo/gloo_transfer.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/dist/backends/gloo/gloo_errors.h"

namespace tessera::dist {

void GlooTransfer::wait(Deadline deadline) {
  if (!buffer_) return;
  // At least 1 ms, as for the collectives (gloo checks for completion before it times out).
  auto left = std::max(std::chrono::ceil<Milliseconds>(deadline - detail::Clock::now()), Milliseconds(1));
  bool completed = false;
  try {
    completed = is_send_ ? buffer_->waitSend(left) : buffer_->waitRecv(left);
  } catch (const std::exception& e) {
    detail::GlooError error = detail::classify_gloo_error(e);
    detail::throw_gloo_failure(error.kind, tessera::detail::concat(what_, ": ", error.message));
  }
  // Only abortWaitSend/abortWaitRecv, which tessera never calls, return false.
  if (!completed) throw Error(tessera::detail::concat(what_, ": aborted"));
  buffer_.reset();
}

}  // namespace tessera::dist
