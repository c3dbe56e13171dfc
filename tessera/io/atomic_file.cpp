#include "tessera/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tessera/core/error.h"

namespace tessera::io {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// The directory holding `path`; "." for a bare file name, so fsync_directory has something to open.
std::string parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// write(2) may write less than asked (signals, pipes, quotas); loop until done or a real error.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError("[fsync_directory] " + dir + ": " + errno_text(errno));
  // Some filesystems (certain FUSE and network mounts) cannot fsync a directory and say EINVAL;
  // there is nothing more we can do for durability there, so that is not an error.
  if (::fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) {
    int err = errno;
    ::close(fd);
    throw IoError("[fsync_directory] " + dir + ": " + errno_text(err));
  }
  ::close(fd);
}

void write_file_atomic(const std::string& path, std::string_view data) {
  // pid + a process-wide counter: unique across processes sharing the directory and across threads
  // of this one, so concurrent writers never clobber each other's temporary file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  auto fail = [&](const std::string& what, int err, bool remove_tmp) {
    if (remove_tmp) ::unlink(tmp.c_str());
    throw IoError("[write_file_atomic] " + path + ": " + what + ": " + errno_text(err));
  };

  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create " + tmp, errno, false);
  if (!write_all(fd, data.data(), data.size())) {
    int err = errno;
    ::close(fd);
    fail("cannot write " + tmp, err, true);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    fail("cannot fsync " + tmp, err, true);
  }
  // close can report a deferred write error (NFS); treat it like a failed write.
  if (::close(fd) != 0) fail("cannot close " + tmp, errno, true);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp + " over it", errno, true);
  try {
    fsync_directory(parent_dir(path));
  } catch (const IoError& e) {
    // The new content is in place; only its durability across a power loss is in doubt.
    throw IoError("[write_file_atomic] " + path + ": written, but " + e.what());
  }
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("[read_file] " + path + ": " + errno_text(errno));
  // Read straight into the string, sized from fstat, but read to EOF rather than trusting the
  // size: files in /proc and pipes report 0, and a file may grow while we read it.
  struct stat st {};
  size_t capacity = ::fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<size_t>(st.st_size) + 1 : 1 << 16;
  std::string out(capacity, '\0');
  size_t len = 0;
  for (;;) {
    if (len == out.size()) out.resize(out.size() * 2);
    ssize_t n = ::read(fd, out.data() + len, out.size() - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw IoError("[read_file] " + path + ": " + errno_text(err));
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  out.resize(len);
  ::close(fd);
  return out;
}

}  // namespace tessera::io
