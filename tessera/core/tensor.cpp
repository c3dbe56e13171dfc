#include "tessera/core/tensor.h"

#include <sstream>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    TESSERA_CHECK(d >= 0, "[empty] negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = Storage::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  } catch (const OutOfMemoryError& e) {
    // The allocator sees only bytes; the shape is what tells the user which tensor was too big.
    throw OutOfMemoryError(detail::concat("[empty] no memory for a ", dtype_name(dtype), " tensor of shape ",
                                          shape_str(shape), ": ", e.what()));
  }
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim(d, dim(), "Tensor::size")]; }

bool Tensor::is_contiguous() const {
  const auto& s = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

bool Tensor::shares_storage_with(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

void* Tensor::raw_data() const {
  if (!checked().storage->device().is_cpu()) [[unlikely]]
    throw ValueError("[Tensor::data] this " + shape_str(shape()) + " tensor is on " + device().str() +
                     ": its memory is not readable from the host; copy it first (to(cpu_device()), .cpu())");
  return data_ptr();
}

void* Tensor::data_ptr() const {
  const auto& i = checked();
  if (!i.storage->resident()) [[unlikely]]
    throw ValueError("[tensor] the memory of this " + shape_str(i.shape) + " tensor has been released (a ZeRO-3 "
                     "parameter between its uses): go through ZeroDataParallel's forward or full_state_dict()");
  return static_cast<char*>(i.storage->data()) + i.offset * static_cast<int64_t>(dtype_size(i.dtype));
}

void Tensor::check_dtype(DType expected, const char* op) const {
  TESSERA_CHECK(dtype() == expected, "[", op, "] expected dtype ", dtype_name(expected), " but the tensor is ",
                dtype_name(dtype()), " with shape ", shape_str(shape()));
}

template <typename T>
T Tensor::item() const {
  TESSERA_CHECK(numel() == 1, "[item] expected a tensor with one element, got shape ", shape_str(shape()));
  // On a device: copied to the host first (waiting for the device), as PyTorch's item() does.
  return (device().is_cpu() ? contiguous() : cpu()).data<T>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = device().is_cpu() ? contiguous() : cpu();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + numel());
}

template float Tensor::item<float>() const;
template int64_t Tensor::item<int64_t>() const;
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  TESSERA_CHECK(!requires_grad || dtype() == DType::Float32,
                "[set_requires_grad] only float32 tensors can require gradients, got ", dtype_name(dtype()));
  TESSERA_CHECK(is_leaf(), "[set_requires_grad] can only be set on leaf tensors (this one has grad_fn ",
                impl_->grad_fn->name(), "); use detach() first");
  impl_->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const auto& i = checked();
  return i.grad ? Tensor(i.grad) : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  checked();
  if (grad.defined())
    TESSERA_CHECK(grad.shape() == shape(), "[set_grad] gradient shape ", shape_str(grad.shape()),
                  " does not match tensor shape ", shape_str(shape()));
  impl_->grad = grad.impl_ptr();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

Tensor Tensor::detach() const {
  return make_view(*this, shape(), strides(), offset());
}

void Tensor::set_grad_buffer(const Tensor& buffer) const {
  checked();
  if (buffer.defined()) {
    TESSERA_CHECK(buffer.shape() == shape() && buffer.dtype() == dtype() && buffer.is_contiguous(),
                  "[set_grad_buffer] the buffer (", shape_str(buffer.shape()), ", ", dtype_name(buffer.dtype()),
                  ") must be a contiguous ", shape_str(shape()), " ", dtype_name(dtype()), " tensor");
  }
  impl_->grad_buffer = buffer.impl_ptr();
}

void Tensor::register_grad_ready_hook(GradReadyHook hook) const {
  TESSERA_CHECK(is_leaf() && requires_grad(),
                "[register_grad_ready_hook] needs a leaf tensor that requires grad (a parameter)");
  impl_->grad_ready_hooks.push_back(std::move(hook));
}

Tensor Tensor::reshape(const Shape& s) const { return tessera::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return tessera::view(*this, s); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return tessera::transpose(*this, a, b); }
Tensor Tensor::permute(const Shape& d) const { return tessera::permute(*this, d); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return tessera::slice(*this, d, s, e, st); }
Tensor Tensor::expand(const Shape& s) const { return tessera::expand(*this, s); }
Tensor Tensor::unsqueeze(int64_t d) const { return tessera::unsqueeze(*this, d); }
Tensor Tensor::squeeze(int64_t d) const { return tessera::squeeze(*this, d); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return tessera::flatten(*this, s, e); }
Tensor Tensor::contiguous() const { return tessera::contiguous(*this); }
Tensor Tensor::clone() const { return tessera::clone(*this); }
Tensor Tensor::to(DType d) const { return tessera::to_dtype(*this, d); }
Tensor Tensor::to(Device device) const { return tessera::to_device(*this, device); }

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream out;
  out << "Tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
  if (numel() <= 16) {
    out << ", values=[";
    Tensor c = dtype() == DType::Int64 ? contiguous() : to(DType::Float32);
    for (int64_t i = 0; i < numel(); ++i) {
      if (i) out << ", ";
      if (dtype() == DType::Int64) out << c.data<int64_t>()[i];
      else out << c.data<float>()[i];
    }
    out << "]";
  }
  out << ")";
  return out.str();
}

Tensor view_of_storage(std::shared_ptr<Storage> storage, const Shape& shape, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void rebind_storage(const Tensor& t, std::shared_ptr<Storage> storage, int64_t offset) {
  TensorImpl* impl = t.impl();
  TESSERA_CHECK(impl != nullptr, "[rebind_storage] undefined tensor");
  TESSERA_CHECK(offset >= 0 && static_cast<size_t>(offset + t.numel()) * dtype_size(impl->dtype) <= storage->nbytes(),
                "[rebind_storage] ", shape_str(impl->shape), " at element ", offset, " does not fit in ",
                storage->nbytes(), " bytes");
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->strides = contiguous_strides(impl->shape);
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

}  // namespace tessera
