#include "tessera/core/stream.h"

#include <iterator>
#include <utility>
#include <vector>

#include "tessera/backend/cuda/stream.h"

namespace tessera {

std::shared_ptr<Event> HostStream::record() {
  static const std::shared_ptr<Event> done = std::make_shared<HostEvent>();
  return done;
}

namespace {
// This thread's StreamGuards, newest last (a handful at most).
thread_local std::vector<std::pair<Device, Stream*>> guarded_streams;

Stream* guarded_stream(Device device) {
  for (auto it = guarded_streams.rbegin(); it != guarded_streams.rend(); ++it)
    if (it->first == device) return it->second;
  return nullptr;
}
}  // namespace

Stream& current_stream(Device device) {
  static HostStream host;
  if (!guarded_streams.empty())
    if (Stream* guarded = guarded_stream(device)) return *guarded;
  if (device.is_cpu()) return host;
  return cuda::compute_stream(device.index);  // or no_cuda.cpp's error naming the device
}

StreamGuard::StreamGuard(Stream& stream) : device_(stream.device()) {
  guarded_streams.emplace_back(device_, &stream);
}

StreamGuard::~StreamGuard() {
  for (auto it = guarded_streams.rbegin(); it != guarded_streams.rend(); ++it)
    if (it->first == device_) {
      guarded_streams.erase(std::next(it).base());
      return;
    }
}

}  // namespace tessera
