#include "tessera/backend/cuda/stream.h"

#include <mutex>
#include <vector>

#include "tessera/backend/cuda/cuda_check.h"
#include "tessera/backend/cuda/device_info.h"

namespace tessera::cuda {
namespace {

// Timing off: an event without timing is the cheap kind cudaStreamWaitEvent is made for.
class CudaEvent final : public Event {
 public:
  CudaEvent(int device, cudaStream_t stream) : device_(device) {
    detail::use_device(device, "cuda::Event");
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  bool query() const override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    TESSERA_CUDA_CHECK(status);
    return true;
  }
  void synchronize() const override {
    detail::use_device(device_, "cuda::Event::synchronize");
    TESSERA_CUDA_CHECK(cudaEventSynchronize(event_));
  }
  cudaEvent_t handle() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class CudaStream final : public Stream {
 public:
  // A new non-blocking stream (a communicator's), or the device's legacy default stream (null:
  // the compute stream, not owned).
  CudaStream(int device, bool create) : device_(device), owned_(create) {
    detail::use_device(device, "cuda::Stream");
    if (create) TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaStream() override {
    if (owned_) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device device() const override { return cuda_device(device_); }
  std::shared_ptr<Event> record() override { return std::make_shared<CudaEvent>(device_, stream_); }
  void wait(const Event& event) override {
    // A host event (the CPU's, always complete) orders nothing on a device.
    if (const auto* cuda_event = dynamic_cast<const CudaEvent*>(&event)) {
      detail::use_device(device_, "cuda::Stream::wait");
      TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream_, cuda_event->handle(), 0));
    } else {
      event.synchronize();
    }
  }
  void synchronize() override {
    detail::use_device(device_, "cuda::Stream::synchronize");
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  int device_;
  bool owned_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

Stream& compute_stream(int device) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<CudaStream>> streams;
  std::lock_guard lock(mu);
  detail::use_device(device, "cuda::compute_stream");
  if (streams.size() <= static_cast<size_t>(device)) streams.resize(static_cast<size_t>(device) + 1);
  if (!streams[static_cast<size_t>(device)])
    streams[static_cast<size_t>(device)] = std::make_unique<CudaStream>(device, /*create=*/false);
  return *streams[static_cast<size_t>(device)];
}

std::unique_ptr<Stream> make_stream(int device) { return std::make_unique<CudaStream>(device, /*create=*/true); }

}  // namespace tessera::cuda
