// Reference-counted, 64-byte-aligned memory on one device. Tensors share a Storage through
// std::shared_ptr, so views are free and the memory goes when the last view does.
#pragma once
#include <cstddef>
#include <memory>

#include "tessera/core/device.h"

namespace tessera {

class Storage {
 public:
  static constexpr size_t kAlignment = 64;  // one cache line; also what AVX-512 loads want

  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t nbytes, Device device) : data_(data), nbytes_(nbytes), device_(device) {}
  void* data_;
  size_t nbytes_;
  Device device_;
};

}  // namespace tessera
