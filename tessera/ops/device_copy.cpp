// to_device: a tensor's bytes moved between the host and a device, or between devices, as one
// contiguous block (the backend's blocking copies; streams and pinned memory come with the training
// path on the GPU). The backward sends the gradient back the same way.
#include "tessera/backend/cuda/device_buffer.h"
#include "tessera/ops/detail.h"

namespace tessera {

Tensor to_device(const Tensor& t, Device device) {
  detail::check_defined(t, "to", "t");
  const Device from = t.device();
  if (from == device) return t;
  // A view is made contiguous where it lies (its device's copy kernel), then moved as one block.
  Tensor source;
  {
    NoGradGuard no_grad;
    source = contiguous(t);
  }
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  if (from.is_cpu()) cuda::copy_host_to_device(out.data_ptr(), source.data_ptr(), bytes, device.index);
  else if (device.is_cpu()) cuda::copy_device_to_host(out.data_ptr(), source.data_ptr(), bytes, from.index);
  else cuda::copy_device_to_device(out.data_ptr(), device.index, source.data_ptr(), from.index, bytes);
  return autograd::record(
      out, "ToDeviceBackward", {t}, [from](const Tensor& g) { return std::vector<Tensor>{to_device(g, from)}; },
      autograd::Saves::Nothing);
}

}  // namespace tessera
