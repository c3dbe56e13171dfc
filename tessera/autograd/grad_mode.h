// Whether ops record history. Thread-local, like PyTorch's: a data-loader thread never sees the
// training thread's no_grad scope.
#pragma once

namespace tessera::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// RAII scope in which ops do not record history (evaluation, optimizer steps).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tessera::autograd

namespace tessera {
using autograd::NoGradGuard;
}
