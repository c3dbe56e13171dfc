// The self-pipe trick (D. J. Bernstein): the launcher's handlers for SIGINT, SIGTERM, SIGCHLD and SIGUSR2
// only write the signal number into a pipe, which the poll() loop reads beside the workers'
// output. All the work (forwarding, reaping) then happens in ordinary code, and a signal can
// never be lost between checking for it and going to sleep in poll().
#pragma once
#include <csignal>
#include <iterator>
#include <vector>

#include "tessera/dist/launcher/fd.h"

namespace tessera::dist::launcher {

// Installs the handlers (and unblocks the signals in this thread) for its lifetime, then restores
// what was there before. Handlers are process-wide, so only one may exist at a time (ValueError).
class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Readable (POLLIN) when a signal has arrived.
  int fd() const { return read_.get(); }
  // The signals received since the last call, in order; never blocks.
  std::vector<int> take();

 private:
  // SIGUSR2 asks the launcher for its workers' stacks and flight records (wedge_watch.h).
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGCHLD, SIGUSR2};
  detail::Fd read_, write_;
  struct sigaction previous_[std::size(kSignals)];
  sigset_t previous_mask_;
};

}  // namespace tessera::dist::launcher
