// ShmSegment: one shared-memory mapping that several processes share, either named (shm_open under
// a fresh random name, which the creator unlinks once the others have mapped it: the parameter
// servers' channel) or unnamed (memfd_create; the others open the creator's /proc/<pid>/fd/<fd>
// while it keeps the descriptor open: the shm backend's group segment and symmetric buffers, of
// which nothing can be left in /dev/shm, even by a killed process). Either way the memory goes
// away with the last mapping.
#pragma once
#include <cstddef>
#include <string>

namespace tessera::dist::detail {

class ShmSegment {
 public:
  ShmSegment() = default;
  // A new segment of `bytes` under a unique name (name() tells which). The pages are allocated
  // up front (posix_fallocate), so a full /dev/shm is an IoError here rather than a SIGBUS later.
  static ShmSegment create(size_t bytes);
  // Maps the segment `name`; IoError when it does not exist or is smaller than `bytes`.
  static ShmSegment open(const std::string& name, size_t bytes);
  // Removes the name; the mappings stay valid. Idempotent.
  static void unlink(const std::string& name);
  // A segment with no name at all (memfd_create): nothing can be left in /dev/shm whatever ends
  // the process, and /dev/shm's size does not bound it. It keeps its descriptor open, so that other
  // processes can open it at peer_path(), until close_descriptor() (or its destruction).
  static ShmSegment create_unnamed(size_t bytes);
  // Maps the file at `path` (another process's peer_path()); IoError as open's.
  static ShmSegment open_path(const std::string& path, size_t bytes);
  // "/proc/<pid>/fd/<fd>" while an unnamed segment's descriptor is open; empty otherwise.
  std::string peer_path() const;
  // Once every other process has mapped it: the mappings keep the memory.
  void close_descriptor();

  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, char* data, size_t size, int fd = -1)
      : name_(std::move(name)), data_(data), size_(size), fd_(fd) {}
  std::string name_;
  char* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // an unnamed segment's, until close_descriptor()
};

}  // namespace tessera::dist::detail
