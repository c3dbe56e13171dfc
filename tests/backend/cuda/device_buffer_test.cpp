#include "tessera/backend/cuda/device_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "tessera/core/error.h"
#include "testing/cuda_device.h"

namespace tessera::cuda {
namespace {

TEST(CudaDeviceBuffer, RoundTripsBytesAtOffsets) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<uint8_t> bytes(1 << 20);
  std::iota(bytes.begin(), bytes.end(), uint8_t{7});
  DeviceBuffer buffer(0, bytes.size());
  EXPECT_EQ(buffer.bytes(), bytes.size());
  EXPECT_NE(buffer.data(), nullptr);
  buffer.copy_from_host(bytes.data(), bytes.size());
  std::vector<uint8_t> back(bytes.size());
  buffer.copy_to_host(back.data(), back.size());
  EXPECT_EQ(back, bytes);

  const std::vector<uint8_t> patch = {1, 2, 3, 4, 5};
  buffer.copy_from_host(patch.data(), patch.size(), bytes.size() - patch.size());
  std::vector<uint8_t> tail(patch.size());
  buffer.copy_to_host(tail.data(), tail.size(), bytes.size() - patch.size());
  EXPECT_EQ(tail, patch);
}

TEST(CudaDeviceBuffer, CopiesThatDoNotFitAreRefused) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  DeviceBuffer buffer(0, 64);
  std::vector<uint8_t> host(128);
  EXPECT_THROW(buffer.copy_from_host(host.data(), 65), ValueError);
  EXPECT_THROW(buffer.copy_from_host(host.data(), 1, 64), ValueError);
  EXPECT_THROW(buffer.copy_to_host(host.data(), 8, SIZE_MAX - 4), ValueError);  // no overflow past the end
  buffer.copy_from_host(host.data(), 0, 64);  // nothing at the end: allowed
}

TEST(CudaDeviceBuffer, EmptyAndMovedBuffersHoldNothing) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  DeviceBuffer empty(0, 0);
  EXPECT_EQ(empty.data(), nullptr);
  DeviceBuffer a(0, 256);
  const void* address = a.data();
  DeviceBuffer b = std::move(a);
  EXPECT_EQ(b.data(), address);
  EXPECT_EQ(b.bytes(), 256u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  EXPECT_EQ(a.bytes(), 0u);
  b = DeviceBuffer(0, 32);
  EXPECT_EQ(b.bytes(), 32u);
}

TEST(CudaDeviceBuffer, AnImpossibleAllocationIsOutOfMemory) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const DeviceProperties p = device_properties(0);
  EXPECT_THROW(DeviceBuffer(0, static_cast<size_t>(p.total_memory) * 4), OutOfMemoryError);
  DeviceBuffer after(0, 1024);  // the failure left the device usable
  EXPECT_NE(after.data(), nullptr);
}

}  // namespace
}  // namespace tessera::cuda
