#include "tessera/backend/cuda/device_buffer.h"

#include <utility>

#include "tessera/backend/cuda/cuda_check.h"

namespace tessera::cuda {

void copy_host_to_device(void* device_destination, const void* host_source, size_t bytes, int device) {
  if (bytes == 0) return;
  detail::use_device(device, "cuda::copy_host_to_device");
  TESSERA_CUDA_CHECK(cudaMemcpy(device_destination, host_source, bytes, cudaMemcpyHostToDevice));
}

void copy_device_to_host(void* host_destination, const void* device_source, size_t bytes, int device) {
  if (bytes == 0) return;
  detail::use_device(device, "cuda::copy_device_to_host");
  TESSERA_CUDA_CHECK(cudaMemcpy(host_destination, device_source, bytes, cudaMemcpyDeviceToHost));
}

void copy_device_to_device(void* destination, int destination_device, const void* source, int source_device,
                           size_t bytes) {
  if (bytes == 0) return;
  detail::use_device(destination_device, "cuda::copy_device_to_device");
  if (destination_device == source_device) {
    TESSERA_CUDA_CHECK(cudaMemcpy(destination, source, bytes, cudaMemcpyDeviceToDevice));
  } else {
    detail::use_device(source_device, "cuda::copy_device_to_device");
    TESSERA_CUDA_CHECK(cudaMemcpyPeer(destination, destination_device, source, source_device, bytes));
  }
}

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
  detail::use_device(device, "cuda::DeviceBuffer");
  if (bytes == 0) return;  // an empty buffer holds no allocation, as an empty CPU storage
  const cudaError_t error = cudaMalloc(&data_, bytes);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw OutOfMemoryError(tessera::detail::concat("[cuda::DeviceBuffer] cannot allocate ", bytes, " bytes on cuda:",
                                                   device, ": ", free_bytes, " of ", total_bytes, " bytes free"));
  }
  TESSERA_CUDA_CHECK(error);
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::exchange(other.device_, -1)),
      bytes_(std::exchange(other.bytes_, 0)),
      data_(std::exchange(other.data_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = std::exchange(other.device_, -1);
    bytes_ = std::exchange(other.bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (data_ == nullptr) return;
  // A destructor cannot throw: a failed free (a device lost mid-run) is left to the next checked call.
  int current = -1;
  cudaGetDevice(&current);
  cudaSetDevice(device_);
  cudaFree(data_);
  if (current >= 0) cudaSetDevice(current);
  data_ = nullptr;
}

void DeviceBuffer::copy_from_host(const void* source, size_t bytes, size_t offset) {
  TESSERA_CHECK(offset <= bytes_ && bytes <= bytes_ - offset, "[cuda::DeviceBuffer::copy_from_host] ", bytes,
                " bytes at offset ", offset, " do not fit a buffer of ", bytes_, " bytes on cuda:", device_);
  copy_host_to_device(static_cast<char*>(data_) + offset, source, bytes, device_);
}

void DeviceBuffer::copy_to_host(void* destination, size_t bytes, size_t offset) const {
  TESSERA_CHECK(offset <= bytes_ && bytes <= bytes_ - offset, "[cuda::DeviceBuffer::copy_to_host] ", bytes,
                " bytes at offset ", offset, " do not fit a buffer of ", bytes_, " bytes on cuda:", device_);
  copy_device_to_host(destination, static_cast<const char*>(data_) + offset, bytes, device_);
}

}  // namespace tessera::cuda
