// Reference-counted memory on one device (64-byte aligned on the CPU), from that device's allocator
// (core/allocator.h). Tensors share a Storage through std::shared_ptr, so views are free and the
// memory goes when the last view does.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tessera/core/device.h"

namespace tessera {

class Storage {
 public:
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  // Memory someone else owns (a NumPy array's buffer, for tessera.from_numpy): never freed here;
  // `release` runs once the last tensor viewing it is gone, and tells the owner it may let go.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  // Counts in-place writes, so that backward can tell a tensor it saved was modified after the
  // forward (the silent wrong gradient PyTorch's version counter also catches).
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  size_t nbytes() const { return nbytes_; }
  bool wraps_external() const { return static_cast<bool>(external_release_); }  // made by wrap()
  Device device() const { return device_; }

  // ZeRO-3 frees a unit's gathered parameters between their uses and gathers them again into the same
  // Storage, so the views that layers hold and the tensors autograd saved stay valid handles (what
  // FSDP does by resizing a storage to 0 and back). While released, data() is null and reading it is
  // the caller's error; the bytes go back to the allocator (and its budget) meanwhile.
  void release_memory();
  void restore_memory();  // new, uninitialised memory of the same size; a no-op when resident
  bool resident() const { return data_ != nullptr || nbytes_ == 0; }

 private:
  Storage(void* data, size_t nbytes, Device device) : data_(data), nbytes_(nbytes), device_(device) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  std::atomic<uint64_t> version_{0};
  std::function<void()> external_release_;  // set for wrap()ped memory
};

}  // namespace tessera
