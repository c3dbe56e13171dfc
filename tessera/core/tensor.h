// Tensor: a cheap value handle (one shared_ptr) over a TensorImpl, which holds a view (offset, shape,
// strides in elements) of a shared Storage plus the autograd state. Copying a Tensor aliases it, as in
// PyTorch and MLX; ops are free functions in tessera/ops/ops.h and the methods below forward to them.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/shape.h"
#include "tessera/core/storage.h"

namespace tessera {

namespace autograd {
class Node;
}

class Tensor;
// Called with the parameter once its .grad is final for this backward pass.
using GradReadyHook = std::function<void(const Tensor&)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::Float32;

  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;            // set on results of recorded ops
  std::weak_ptr<autograd::Node> grad_accumulator;     // leaves: shared by every use in one graph
  std::vector<GradReadyHook> grad_ready_hooks;        // leaves: see Tensor::register_grad_ready_hook
  std::shared_ptr<TensorImpl> grad_buffer;            // leaves: see Tensor::set_grad_buffer
  // leaves: which backward claimed grad_buffer for a gradient it is computing there
  // (autograd::gradient_destination): its thread's pass marker and the pass; null when unclaimed.
  const void* grad_buffer_claimer = nullptr;
  uint64_t grad_buffer_claim_pass = 0;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A new, uninitialised, contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = cpu_device());

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  const Shape& shape() const { return checked().shape; }
  const Shape& strides() const { return checked().strides; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return shape_numel(shape()); }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  int64_t offset() const { return checked().offset; }
  bool is_contiguous() const;
  bool shares_storage_with(const Tensor& other) const;

  // The first element's host address. A tensor on a device has none: ValueError naming the device
  // and saying to copy it to the CPU (to(cpu_device())) first.
  void* raw_data() const;
  // The first element's address on the tensor's own device: a device address for a GPU tensor, for
  // its kernels and copies, never dereferenced on the host.
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    check_dtype(dtype_of<T>(), "Tensor::data");
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  T item() const;
  template <typename T>
  std::vector<T> to_vector() const;  // in logical (row-major) order

  // Autograd.
  bool requires_grad() const { return checked().requires_grad; }
  Tensor& set_requires_grad(bool requires_grad);
  bool is_leaf() const { return checked().grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked().grad_fn; }
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  // Backward from this tensor. Without `gradient` the tensor must hold one element.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // shares storage, no history
  // Fires during backward the moment this leaf's .grad is final (all its uses accumulated) —
  // data-parallel training starts communicating from here, overlapped with the rest of backward.
  void register_grad_ready_hook(GradReadyHook hook) const;
  // Where backward puts this leaf's gradient when .grad is unset: it copies the gradient into
  // `buffer` (same shape, contiguous) and makes .grad that tensor, instead of allocating a new one.
  // DDP points it at the parameter's slot of its bucket (gradient_as_bucket_view), which saves the
  // copies into and out of the bucket. An undefined tensor removes it.
  void set_grad_buffer(const Tensor& buffer) const;

  // Views and conversions (forwarding to tessera/ops/ops.h).
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const Shape& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor expand(const Shape& shape) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;  // to_device
  Tensor cuda(int index = 0) const { return to(cuda_device(index)); }
  Tensor cpu() const { return to(cpu_device()); }

  std::string str() const;  // shape, dtype and (for small tensors) values

 private:
  const TensorImpl& checked() const {
    if (!impl_) throw ValueError("[Tensor] use of an undefined tensor");
    return *impl_;
  }
  void check_dtype(DType expected, const char* op) const;
  std::shared_ptr<TensorImpl> impl_;
};

// Makes a tensor that views `base`'s storage with another shape, strides and offset.
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);
// A contiguous `shape` tensor at element `offset` of `storage` (memory made elsewhere: a flat
// buffer, a shared-memory segment).
Tensor view_of_storage(std::shared_ptr<Storage> storage, const Shape& shape, int64_t offset, DType dtype = DType::Float32);
// Points `t` itself at that place in `storage`, contiguous: every handle on it (the layers' own)
// sees the new memory. The caller copies the values over first. ZeRO's flat buffers and the
// parameter server's shared segment bind parameters so.
void rebind_storage(const Tensor& t, std::shared_ptr<Storage> storage, int64_t offset);

}  // namespace tessera
