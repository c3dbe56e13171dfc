#include "tessera/dist/launcher/signal_pipe.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "tessera/core/error.h"

namespace tessera::dist::launcher {

namespace {

// The write end the handler uses; -1 when no SignalPipe exists. A lock-free atomic int is
// async-signal-safe to read.
std::atomic<int> g_write_fd{-1};

extern "C" void on_signal(int signal) {
  int saved = errno;  // the interrupted code may be about to read errno
  int fd = g_write_fd.load();
  if (fd >= 0) {
    unsigned char byte = static_cast<unsigned char>(signal);
    // Non-blocking: if the pipe is full, poll() will wake anyway and the lost byte repeats a
    // signal already queued there (SIGCHLD is only a hint to reap; waitpid finds every exit).
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  static_assert(std::atomic<int>::is_always_lock_free);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw IoError(tessera::detail::concat("[run] pipe2 failed: ", std::strerror(errno)));
  read_ = detail::Fd(fds[0]);
  write_ = detail::Fd(fds[1]);
  int expected = -1;
  TESSERA_CHECK(g_write_fd.compare_exchange_strong(expected, write_.get()),
                "[run] another launch() is already running in this process; signal handlers are process-wide");

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART keeps other threads' blocking calls from failing with EINTR; SA_NOCLDSTOP because a
  // stopped (not exited) worker is no reason to wake up.
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &action, &previous_[i]);

  sigset_t wanted;
  sigemptyset(&wanted);
  for (int s : kSignals) sigaddset(&wanted, s);
  ::pthread_sigmask(SIG_UNBLOCK, &wanted, &previous_mask_);
}

SignalPipe::~SignalPipe() {
  ::pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  g_write_fd.store(-1);
}

std::vector<int> SignalPipe::take() {
  std::vector<int> signals;
  unsigned char buffer[64];
  for (;;) {
    ssize_t n = ::read(read_.get(), buffer, sizeof buffer);
    if (n > 0) {
      signals.insert(signals.end(), buffer, buffer + n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return signals;  // EAGAIN: empty
    }
  }
}

}  // namespace tessera::dist::launcher
