// Small POSIX file-descriptor helpers for the launcher: an owning handle and an EINTR-safe write.
#pragma once
#include <cstddef>
#include <utility>

namespace tessera::dist::launcher::detail {

// Owns one file descriptor and closes it once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// Writes all of [data, data + size) to `fd`, retrying short writes and EINTR, waiting (poll) when a
// non-blocking fd is full. Returns false on any other error (e.g. EPIPE): output is then dropped,
// which is better for a running job than failing it.
bool write_all(int fd, const char* data, size_t size);

void set_nonblocking(int fd);

}  // namespace tessera::dist::launcher::detail
