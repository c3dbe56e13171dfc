// Factories (on the CPU), copies, dtype conversion and the in-place helpers optimizers use; the
// copies and in-place helpers run the kernel of their tensors' device (kernels.h).
#include <cstring>

#include "tessera/util/thread_pool.h"
#include "tessera/ops/detail.h"
#include "tessera/ops/kernels.h"

namespace tessera {

using autograd::record;

Tensor zeros(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  char* p = static_cast<char*>(t.raw_data());
  const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(dtype));
  parallel_for(0, bytes, int64_t{1} << 20, [&](int64_t b, int64_t e) { std::memset(p + b, 0, e - b); });
  return t;
}

Tensor full(const Shape& shape, float value, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_(t, value);
  return t;
}

Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0f, dtype); }
namespace {
// `t`'s shape and dtype on its device, every element `value`.
Tensor filled_like(const Tensor& t, float value) {
  if (t.device().is_cpu()) return full(t.shape(), value, t.dtype());
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  kernels_for(out).fill(out, value);
  return out;
}
}  // namespace

Tensor zeros_like(const Tensor& t) { return t.device().is_cpu() ? zeros(t.shape(), t.dtype()) : filled_like(t, 0.0f); }
Tensor ones_like(const Tensor& t) { return filled_like(t, 1.0f); }
Tensor scalar_tensor(float value) { return full({}, value); }

Tensor arange(int64_t end, DType dtype) {
  Tensor t = Tensor::empty({end}, DType::Int64);
  for (int64_t i = 0; i < end; ++i) t.data<int64_t>()[i] = i;
  return dtype == DType::Int64 ? t : to_dtype(t, dtype);
}

Tensor from_vector(const std::vector<float>& values, const Shape& shape) {
  TESSERA_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "[from_vector] ", values.size(),
                " values do not fill shape ", shape_str(shape));
  Tensor t = Tensor::empty(shape);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * 4);
  return t;
}

Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape) {
  TESSERA_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "[from_vector] ", values.size(),
                " values do not fill shape ", shape_str(shape));
  Tensor t = Tensor::empty(shape, DType::Int64);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * 8);
  return t;
}

Tensor randn(const Shape& shape, Generator& gen) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.normal();
  return t;
}

Tensor rand(const Shape& shape, Generator& gen) { return uniform(shape, 0.0f, 1.0f, gen); }

Tensor uniform(const Shape& shape, float low, float high, Generator& gen) {
  TESSERA_CHECK(low <= high, "[uniform] low ", low, " > high ", high);
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = low + (high - low) * gen.uniform();
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen) {
  TESSERA_CHECK(low < high, "[randint] empty range [", low, ", ", high, ")");
  Tensor t = Tensor::empty(shape, DType::Int64);
  uint64_t span = static_cast<uint64_t>(high - low);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = low + static_cast<int64_t>(gen.next_u64() % span);
  return t;
}

namespace {

// An in-place write to a tensor that autograd tracks would silently corrupt gradients.
void check_inplace_allowed(const Tensor& t, const char* op) {
  TESSERA_CHECK(!(autograd::grad_enabled() && t.requires_grad()), "[", op, "] in-place update of a tensor of shape ",
                shape_str(t.shape()), " that requires grad; do it inside a NoGradGuard scope (as optimizers do)");
}

}  // namespace

void copy_(Tensor& dst, const Tensor& src) {
  detail::check_defined(dst, "copy_", "dst");
  detail::check_defined(src, "copy_", "src");
  check_inplace_allowed(dst, "copy_");
  dst.impl()->storage->bump_version();
  TESSERA_CHECK(broadcast_shapes(dst.shape(), src.shape(), "copy_") == dst.shape(), "[copy_] source shape ",
                shape_str(src.shape()), " does not broadcast to destination shape ", shape_str(dst.shape()));
  // From another device: its values brought to dst's first (a blocking copy), as PyTorch's copy_ does;
  // load_state_dict fills a model on the GPU from a checkpoint read on the host so.
  if (src.device() != dst.device()) {
    NoGradGuard no_grad;
    kernels_for(dst).copy(dst, to_device(src, dst.device()));
    return;
  }
  kernels_for(dst).copy(dst, src);
}

Tensor contiguous(const Tensor& t) {
  detail::check_defined(t, "contiguous", "t");
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  kernels_for(t).copy(out, t);
  return record(out, "ContiguousBackward", {t}, [](const Tensor& g) { return std::vector<Tensor>{g}; }, autograd::Saves::Nothing);
}

Tensor clone(const Tensor& t) {
  detail::check_defined(t, "clone", "t");
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  kernels_for(t).copy(out, t);
  return record(out, "CloneBackward", {t}, [](const Tensor& g) { return std::vector<Tensor>{g}; }, autograd::Saves::Nothing);
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  detail::check_defined(t, "to", "t");
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype, t.device());
  kernels_for(t).copy(out, t);
  return out;  // conversions are not differentiable (only float32 carries gradients)
}

void fill_(Tensor& t, float value) {
  detail::check_defined(t, "fill_", "t");
  check_inplace_allowed(t, "fill_");
  t.impl()->storage->bump_version();
  kernels_for(t).fill(t, value);
}

void add_(Tensor& dst, const Tensor& src, float alpha) {
  detail::check_float(dst, "add_", "dst");
  detail::check_float(src, "add_", "src");
  check_inplace_allowed(dst, "add_");
  dst.impl()->storage->bump_version();
  TESSERA_CHECK(broadcast_shapes(dst.shape(), src.shape(), "add_") == dst.shape(), "[add_] source shape ",
                shape_str(src.shape()), " does not broadcast to destination shape ", shape_str(dst.shape()));
  detail::check_same_device(dst, src, "add_");
  kernels_for(dst).add_scaled(dst, src, alpha);
}

void mul_(Tensor& dst, float value) {
  detail::check_float(dst, "mul_", "dst");
  check_inplace_allowed(dst, "mul_");
  dst.impl()->storage->bump_version();
  kernels_for(dst).scale(dst, value);
}

}  // namespace tessera
