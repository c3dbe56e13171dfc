// CUDA streams and events (backend/cuda/stream.h): one compute stream per device, events that order
// another stream without the host, and the host waiting for an event. And an op without a CUDA
// kernel yet names itself and the device (ops/kernels.h), never computing on the CPU instead.
#include <gtest/gtest.h>

#include <string>

#include "tessera/backend/cuda/stream.h"
#include "tessera/ops/ops.h"
#include "testing/cuda_device.h"

namespace tessera {
namespace {

TEST(CudaStream, OneComputeStreamPerDeviceAndEventsThatOrderAnother) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Stream& compute = current_stream(cuda_device(0));
  EXPECT_EQ(&compute, &current_stream(cuda_device(0)));
  EXPECT_EQ(compute.device(), cuda_device(0));
  Tensor x = randn({1 << 20}).cuda();  // work issued before the event
  std::unique_ptr<Stream> side = cuda::make_stream(0);
  side->wait(*compute.record());
  std::shared_ptr<Event> after = side->record();
  after->synchronize();
  EXPECT_TRUE(after->query());
  compute.synchronize();
  {
    StreamGuard on_side(*side);
    EXPECT_EQ(&current_stream(cuda_device(0)), side.get());
  }
  EXPECT_EQ(&current_stream(cuda_device(0)), &compute);
  EXPECT_EQ(x.cpu().numel(), 1 << 20);
}

}  // namespace
}  // namespace tessera
