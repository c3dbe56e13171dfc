// One allocation of device memory (cudaMalloc), freed when the buffer goes. The caching allocator of
// the training path builds on this; tests and benchmarks use it directly. Its pointer is a device
// address: never dereference it on the host.
#pragma once
#include <cstddef>

namespace tessera::cuda {

// Blocking copies between host memory and device memory (cudaMemcpy after the device's earlier work),
// and between devices: what DeviceBuffer and Tensor::to(Device) move bytes with.
void copy_host_to_device(void* device_destination, const void* host_source, size_t bytes, int device);
void copy_device_to_host(void* host_destination, const void* device_source, size_t bytes, int device);
void copy_device_to_device(void* destination, int destination_device, const void* source, int source_device,
                           size_t bytes);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Throws NotSupportedError naming the reason where `device` is not usable (a CPU-only build, no
  // driver, no such device) and OutOfMemoryError where the device has no room.
  DeviceBuffer(int device, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  int device() const { return device_; }
  size_t bytes() const { return bytes_; }
  void* data() { return data_; }
  const void* data() const { return data_; }

  // Blocking copies of `bytes` bytes at `offset` into the buffer; ValueError where they do not fit.
  void copy_from_host(const void* source, size_t bytes, size_t offset = 0);
  void copy_to_host(void* destination, size_t bytes, size_t offset = 0) const;

 private:
  void release() noexcept;
  int device_ = -1;
  size_t bytes_ = 0;
  void* data_ = nullptr;
};

}  // namespace tessera::cuda
