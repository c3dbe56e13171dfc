#include "tessera/backend/cuda/device_buffer.h"

#include <utility>

#include "tessera/backend/cuda/cuda_check.h"

namespace tessera::cuda {

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
  if (bytes == 0) return;
  detail::use_device(device_, "cuda::DeviceBuffer::copy_from_host");
  TESSERA_CUDA_CHECK(cudaMemcpy(static_cast<char*>(data_) + offset, source, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::copy_to_host(void* destination, size_t bytes, size_t offset) const {
  TESSERA_CHECK(offset <= bytes_ && bytes <= bytes_ - offset, "[cuda::DeviceBuffer::copy_to_host] ", bytes,
                " bytes at offset ", offset, " do not fit a buffer of ", bytes_, " bytes on cuda:", device_);
  if (bytes == 0) return;
  detail::use_device(device_, "cuda::DeviceBuffer::copy_to_host");
  TESSERA_CUDA_CHECK(cudaMemcpy(destination, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace tessera::cuda
