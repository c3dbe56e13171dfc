#include "tessera/dist/backends/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::dist::detail {

using tessera::detail::concat;

namespace {

std::string unique_name() {
  // pid + a per-process counter make the name unique on this machine; the random part keeps a
  // stale segment of a crashed earlier process with a recycled pid from colliding (O_EXCL would
  // refuse it anyway, and we retry).
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  uint64_t random = (uint64_t{device()} << 32) ^ device();
  return concat("/tessera-shm-", getpid(), "-", counter.fetch_add(1), "-", std::hex, random);
}

// MAP_POPULATE faults every page in now, so the first collective is not charged for it.
char* map_fd(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    throw IoError(concat("[shm] cannot map shared-memory segment ", name, " (", bytes, " bytes): ", std::strerror(e)));
  }
  return static_cast<char*>(p);
}

}  // namespace

ShmSegment ShmSegment::create(size_t bytes) {
  for (int attempt = 0;; ++attempt) {
    std::string name = unique_name();
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      int e = errno;
      if (e == EEXIST && attempt < 8) continue;
      throw IoError(concat("[shm] cannot create shared-memory segment ", name, ": ", std::strerror(e)));
    }
    int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0) {
      close(fd);
      shm_unlink(name.c_str());
      throw IoError(concat("[shm] cannot allocate ", bytes, " bytes of shared memory for ", name, ": ",
                           std::strerror(rc), " (is /dev/shm large enough? e.g. docker --shm-size)"));
    }
    char* data = nullptr;
    try {
      data = map_fd(fd, bytes, name);
    } catch (...) {
      close(fd);
      shm_unlink(name.c_str());
      throw;
    }
    close(fd);
    return ShmSegment(std::move(name), data, bytes);
  }
}

namespace {

// Maps an open shared-memory file of at least `bytes`, then closes `fd` (the mapping stays).
char* map_opened(int fd, size_t bytes, const std::string& what) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    close(fd);
    throw IoError(concat("[shm] shared-memory segment ", what, " has ", st.st_size, " bytes; expected ", bytes));
  }
  char* data = nullptr;
  try {
    data = map_fd(fd, bytes, what);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return data;
}

}  // namespace

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    int e = errno;
    throw IoError(concat("[shm] cannot open shared-memory segment ", name, ": ", std::strerror(e),
                         " (are all ranks on one machine, in one IPC namespace?)"));
  }
  return ShmSegment(name, map_opened(fd, bytes, name), bytes);
}

ShmSegment ShmSegment::open_path(const std::string& path, size_t bytes) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    throw IoError(concat("[shm] cannot open shared-memory file ", path, ": ", std::strerror(e),
                         " (are all ranks in one PID namespace?)"));
  }
  return ShmSegment(std::string(), map_opened(fd, bytes, path), bytes);
}

ShmSegment ShmSegment::create_unnamed(size_t bytes) {
  int fd = memfd_create("tessera-shm", MFD_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    throw IoError(concat("[shm] cannot create an unnamed shared-memory file: ", std::strerror(e)));
  }
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    throw IoError(concat("[shm] cannot allocate ", bytes, " bytes of shared memory: ", std::strerror(rc)));
  }
  try {
    return ShmSegment(std::string(), map_fd(fd, bytes, "(unnamed)"), bytes, fd);
  } catch (...) {
    close(fd);
    throw;
  }
}

std::string ShmSegment::peer_path() const { return fd_ < 0 ? std::string() : concat("/proc/", getpid(), "/fd/", fd_); }

void ShmSegment::close_descriptor() {
  if (fd_ >= 0) close(std::exchange(fd_, -1));
}

void ShmSegment::unlink(const std::string& name) { shm_unlink(name.c_str()); }

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) munmap(data_, size_);
  close_descriptor();
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    close_descriptor();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

}  // namespace tessera::dist::detail
