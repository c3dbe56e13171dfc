// Streams and events: the order work runs in on a device, and points in that order. On a CUDA
// device a stream is a CUDA stream and work on it runs after the call that issued it returns; an
// event marks a point of one stream that another stream (no host wait) or the host can wait for.
// The CPU has one stream, the host thread itself: its work is done when the call returns, so its
// events are complete once recorded and waiting on them costs nothing. Communication uses these to
// run a collective after the compute that produced its buffer without the host waiting in between
// (dist/work.h, dist/communicator.h).
#pragma once
#include <memory>

#include "tessera/core/device.h"

namespace tessera {

class Event {
 public:
  virtual ~Event() = default;
  // Whether the work before this point has finished.
  virtual bool query() const = 0;
  // Blocks the host until it has.
  virtual void synchronize() const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  // An event at the current end of this stream.
  virtual std::shared_ptr<Event> record() = 0;
  // Work issued to this stream from now on runs after `event`, without the host waiting.
  virtual void wait(const Event& event) = 0;
  // Blocks the host until everything issued to this stream has run.
  virtual void synchronize() = 0;
};

// The stream a device's ops run on (one compute stream per device: backend/cuda/stream.h). The
// CPU's is the host thread. In a build without CUDA, a CUDA device gives NotSupportedError naming it.
Stream& current_stream(Device device);

// Makes `stream` its device's current stream on this thread for the guard's life (PyTorch's
// `with torch.cuda.stream(s)`): collectives issued meanwhile run after its work (kernels: compute stream).
class StreamGuard {
 public:
  explicit StreamGuard(Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
};

// The CPU's host "stream", and its events (complete when recorded).
class HostEvent final : public Event {
 public:
  bool query() const override { return true; }
  void synchronize() const override {}
};

class HostStream final : public Stream {
 public:
  Device device() const override { return cpu_device(); }
  std::shared_ptr<Event> record() override;
  void wait(const Event& event) override { event.synchronize(); }
  void synchronize() override {}
};

}  // namespace tessera
