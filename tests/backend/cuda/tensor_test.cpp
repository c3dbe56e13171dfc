// Tensors on a CUDA device: the allocator seam, copies both ways, no host pointer of device memory,
// and the copy's gradient (checked against the CPU).
#include <gtest/gtest.h>

#include <cstring>

#include "tessera/autograd/gradcheck.h"
#include "tessera/backend/cuda/allocator.h"
#include "tessera/core/allocator.h"
#include "tessera/ops/ops.h"
#include "testing/cuda_device.h"

namespace tessera {
namespace {

TEST(CudaTensor, CopiesToTheDeviceAndBackBitForBit) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor f = randn({37, 129});
  Tensor on_device = f.cuda();
  EXPECT_EQ(on_device.device(), cuda_device(0));
  EXPECT_EQ(on_device.shape(), f.shape());
  EXPECT_EQ(on_device.dtype(), DType::Float32);
  Tensor back = on_device.cpu();
  EXPECT_EQ(std::memcmp(back.data<float>(), f.data<float>(), f.numel() * sizeof(float)), 0);

  Tensor ids = randint(-5, 1000, {17});
  EXPECT_EQ(ids.cuda().cpu().to_vector<int64_t>(), ids.to_vector<int64_t>());
  Tensor half = f.to(DType::BFloat16);
  Tensor half_back = half.cuda().cpu();
  EXPECT_EQ(std::memcmp(half_back.raw_data(), half.raw_data(), half.numel() * 2), 0);

  Tensor empty = Tensor::empty({0, 5}).cuda();
  EXPECT_EQ(empty.cpu().numel(), 0);
}

TEST(CudaTensor, AStridedHostViewArrivesInLogicalOrder) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor a = randn({8, 12});
  Tensor view = a.transpose(0, 1).slice(0, 1, 11, 2);  // (5, 8), not contiguous
  ASSERT_FALSE(view.is_contiguous());
  EXPECT_EQ(view.cuda().cpu().to_vector<float>(), view.to_vector<float>());
  // A strided view on the device has no copy kernel yet: a clear error, not garbage.
  Tensor on_device = a.cuda();
  EXPECT_THROW(on_device.transpose(0, 1).cpu(), NotSupportedError);
}

TEST(CudaTensor, DeviceMemoryHasNoHostPointer) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor t = randn({4}).cuda();
  try {
    t.data<float>();
    FAIL() << "a host pointer to device memory";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_NE(t.data_ptr(), nullptr);
  EXPECT_THROW(t.to_vector<float>(), ValueError);
}

// The copy's backward sends the gradient back to the source's device: CPU -> GPU -> CPU is the
// identity, so its gradient must equal the CPU's finite differences.
TEST(CudaTensor, TheCopyIsDifferentiable) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor w = randn({3, 5});
  auto result = autograd::gradcheck([&](const std::vector<Tensor>& in) { return in[0].cuda().cpu() * w; },
                                    {randn({3, 5})});
  EXPECT_TRUE(result.ok) << result.message;

  Tensor x = randn({3, 5}).set_requires_grad(true);
  sum(x.cuda().cpu() * w).backward();
  EXPECT_EQ(x.grad().device(), cpu_device());
  EXPECT_EQ(x.grad().to_vector<float>(), w.to_vector<float>());
}

TEST(CudaAllocator, FreedBlocksAreReusedAndCounted) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Allocator& allocator = allocator_for(cuda_device(0));
  allocator.empty_cache();
  const AllocatorStats start = allocator.stats(cuda_device(0));
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1024, 1024}, DType::Float32, cuda_device(0));  // 4 MiB: a large class
    first = t.data_ptr();
    const AllocatorStats held = allocator.stats(cuda_device(0));
    EXPECT_EQ(held.allocated, start.allocated + (size_t{4} << 20));
    EXPECT_GE(held.reserved, held.allocated);
    EXPECT_GE(held.peak_allocated, held.allocated);
  }
  const AllocatorStats freed = allocator.stats(cuda_device(0));
  EXPECT_EQ(freed.allocated, start.allocated);
  EXPECT_EQ(freed.reserved, start.reserved + (size_t{4} << 20));  // cached, not given back
  {
    Tensor again = Tensor::empty({1000, 1040}, DType::Float32, cuda_device(0));  // same 2 MiB class: 4 MiB
    EXPECT_EQ(again.data_ptr(), first);
  }
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats(cuda_device(0)).reserved, start.reserved);
}

TEST(CudaAllocator, OutOfMemoryNamesTheTensorAndTheFigures) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t too_many = cuda::device_properties(0).total_memory;  // float32: 4x the device
  try {
    Tensor::empty({too_many}, DType::Float32, cuda_device(0));
    FAIL() << "no error for " << too_many << " floats";
  } catch (const OutOfMemoryError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[" + std::to_string(too_many) + "]"), std::string::npos) << message;
    EXPECT_NE(message.find("reserves"), std::string::npos) << message;
  }
  Tensor after = randn({16}).cuda();  // the device is still usable
  EXPECT_EQ(after.cpu().numel(), 16);
}

}  // namespace
}  // namespace tessera
