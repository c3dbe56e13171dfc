#include "tessera/backend/cuda/device_info.h"

#include <gtest/gtest.h>

#include "tessera/backend/cuda/device_buffer.h"
#include "tessera/core/error.h"
#include "testing/cuda_device.h"

namespace tessera::cuda {
namespace {

TEST(CudaDeviceInfo, ReportsTheDeviceAndTheLibrariesLoaded) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  EXPECT_TRUE(compiled());
  EXPECT_TRUE(unavailable_reason().empty());
  for (int i = 0; i < device_count(); ++i) {
    const DeviceProperties p = device_properties(i);
    EXPECT_EQ(p.index, i);
    EXPECT_FALSE(p.name.empty());
    EXPECT_GE(p.major, 7) << p.name << ": older than any GPU CUDA 13 supports";
    EXPECT_GT(p.multiprocessors, 0);
    EXPECT_GT(p.total_memory, int64_t{1} << 30);
    EXPECT_GT(p.free_memory, 0);
    EXPECT_LE(p.free_memory, p.total_memory);
  }
  const std::vector<LibraryVersion> versions = library_versions();
  ASSERT_EQ(versions.size(), 5u);
  for (const LibraryVersion& v : versions) EXPECT_NE(v.loaded, "none") << v.name << " was not loaded";
}

TEST(CudaDeviceInfo, ADeviceBeyondTheLastIsAClearError) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  try {
    device_properties(device_count());
    FAIL() << "no error for cuda:" << device_count();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA_VISIBLE_DEVICES"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DeviceBuffer(-1, 16), ValueError);
}

// Where no device is there (every CPU machine, CPU-only builds included), asking for one says why
// instead of crashing or falling back to the CPU silently.
TEST(NoGpuDevice, AskingForOneSaysWhy) {
  if (device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device: the Cuda* tests cover it";
  EXPECT_FALSE(unavailable_reason().empty());
  try {
    DeviceBuffer buffer(0, 1024);
    FAIL() << "a device buffer without a device";
  } catch (const NotSupportedError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cuda::DeviceBuffer"), std::string::npos) << message;
    EXPECT_NE(message.find(compiled() ? unavailable_reason() : std::string("built without CUDA")), std::string::npos)
        << message;
  }
  if (compiled()) {
    EXPECT_THROW(device_properties(0), NotSupportedError);
    // The versions are read from the libraries even without a device: the runtime, cuBLASLt, cuDNN
    // and NCCL are there (linked), the driver is not.
    const std::vector<LibraryVersion> versions = library_versions();
    ASSERT_EQ(versions.size(), 5u);
    for (size_t i = 1; i < versions.size(); ++i) EXPECT_NE(versions[i].loaded, "none") << versions[i].name;
  } else {
    EXPECT_TRUE(library_versions().empty());
  }
}

}  // namespace
}  // namespace tessera::cuda
