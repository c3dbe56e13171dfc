#include "tessera/core/allocator.h"

#include <gtest/gtest.h>

#include "tessera/backend/cuda/device_info.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

TEST(Allocator, TheCpuAllocatorCountsTensorsItHolds) {
  Allocator& cpu = allocator_for(cpu_device());
  const AllocatorStats before = cpu.stats(cpu_device());
  {
    Tensor t = Tensor::empty({256, 1024});  // 1 MiB
    const AllocatorStats during = cpu.stats(cpu_device());
    EXPECT_GE(during.allocated, before.allocated + (size_t{1} << 20));
    EXPECT_GE(during.peak_allocated, during.allocated);
    EXPECT_GE(during.reserved, during.allocated);
  }
  EXPECT_EQ(cpu.stats(cpu_device()).allocated, before.allocated);
}

TEST(Allocator, ToTheDeviceATensorIsOnIsTheTensorItself) {
  Tensor t = randn({3, 4});
  Tensor same = t.to(cpu_device());
  EXPECT_TRUE(same.shares_storage_with(t));
  EXPECT_EQ(same.impl(), t.impl());
}

// Without a device (every CPU machine; CPU-only builds too), a tensor on cuda:0 is an error that
// says why: never a tensor silently made on the CPU.
TEST(NoGpuDevice, ATensorOnCudaSaysWhyItCannotBe) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device: the CudaTensor tests cover it";
  try {
    Tensor::empty({2, 2}, DType::Float32, cuda_device(0));
    FAIL() << "a tensor on cuda:0 without a device";
  } catch (const NotSupportedError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(cuda::compiled() ? "no CUDA device" : "built without CUDA"), std::string::npos) << message;
  }
  EXPECT_THROW(randn({2, 2}).cuda(), NotSupportedError);
  EXPECT_THROW(allocator_for(cuda_device(0)).allocate(64, cuda_device(0)), NotSupportedError);
}

}  // namespace
}  // namespace tessera
