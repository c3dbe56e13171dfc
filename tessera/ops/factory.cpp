// Factories, copies, dtype conversion and the in-place helpers optimizers use.
#include <cstring>

#include "tessera/backend/cpu/loops.h"
#include "tessera/core/half_codec.h"
#include "tessera/util/thread_pool.h"
#include "tessera/ops/detail.h"

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
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }
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

template <typename Dst, typename Src, typename Convert>
void strided_convert(Tensor& dst, const Tensor& src, const Convert& convert) {
  Shape sst = detail::broadcast_strides(src, dst.shape());
  Dst* d = static_cast<Dst*>(dst.raw_data());
  const Src* s = static_cast<const Src*>(src.raw_data());
  cpu::for_each_row<2>(dst.shape(), {&dst.strides(), &sst},
                       [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
                         Dst* dp = d + off[0];
                         const Src* sp = s + off[1];
                         if (st[0] == 1 && st[1] == 1) {
                           for (int64_t i = 0; i < n; ++i) dp[i] = convert(sp[i]);
                         } else {
                           for (int64_t i = 0; i < n; ++i) dp[i * st[0]] = convert(sp[i * st[1]]);
                         }
                       });
}

void convert_into(Tensor& dst, const Tensor& src) {
  auto same = [](auto v) { return v; };
  DType a = dst.dtype(), b = src.dtype();
  if (a == b && dst.shape() == src.shape() && dst.is_contiguous() && src.is_contiguous()) {
    // A plain copy (clone, a gradient into DDP's bucket): memcpy split across the intra-op threads
    // (memmove where the two overlap) instead of the strided loop. Measured in `tessera bench ddp`
    // on the MLP: the loop was 15% of a DDP step, more than the whole all-reduce.
    char* d = static_cast<char*>(dst.raw_data());
    const char* s = static_cast<const char*>(src.raw_data());
    const int64_t bytes = src.numel() * static_cast<int64_t>(dtype_size(src.dtype()));
    if (d == s) return;
    if (d + bytes <= s || s + bytes <= d) {  // apart: split across the intra-op threads
      parallel_for(0, bytes, int64_t{1} << 18, [=](int64_t b, int64_t e) {
        std::memcpy(d + b, s + b, static_cast<size_t>(e - b));
      });
    } else {
      std::memmove(d, s, static_cast<size_t>(bytes));
    }
    return;
  }
  if (a == DType::Float32 && b == DType::Float32) strided_convert<float, float>(dst, src, same);
  else if (a == DType::Int64 && b == DType::Int64) strided_convert<int64_t, int64_t>(dst, src, same);
  else if (a == DType::BFloat16 && b == DType::BFloat16) strided_convert<BFloat16, BFloat16>(dst, src, same);
  else if (a == DType::Float32 && b == DType::Int64)
    strided_convert<float, int64_t>(dst, src, [](int64_t v) { return static_cast<float>(v); });
  else if (a == DType::Int64 && b == DType::Float32)
    strided_convert<int64_t, float>(dst, src, [](float v) { return static_cast<int64_t>(v); });
  else if (a == DType::BFloat16 && b == DType::Float32)
    strided_convert<BFloat16, float>(dst, src, [](float v) { return float_to_bf16(v); });
  else if (a == DType::Float32 && b == DType::BFloat16)
    strided_convert<float, BFloat16>(dst, src, [](BFloat16 v) { return bf16_to_float(v); });
  else if (a == DType::BFloat16 && b == DType::Int64)
    strided_convert<BFloat16, int64_t>(dst, src, [](int64_t v) { return float_to_bf16(static_cast<float>(v)); });
  else if (a == DType::Int64 && b == DType::BFloat16)
    strided_convert<int64_t, BFloat16>(dst, src, [](BFloat16 v) { return static_cast<int64_t>(bf16_to_float(v)); });
  else if (a == DType::Float16 && b == DType::Float16) strided_convert<Half, Half>(dst, src, same);
  else if (a == DType::Float16 && b == DType::Float32)
    strided_convert<Half, float>(dst, src, [](float v) { return Half{fp16_from_float(v)}; });
  else if (a == DType::Float32 && b == DType::Float16)
    strided_convert<float, Half>(dst, src, [](Half v) { return fp16_to_float(v.bits); });
  else
    throw NotSupportedError(std::string("[to] no conversion from ") + dtype_name(b) + " to " + dtype_name(a) +
                            "; go through float32");
}

}  // namespace

void copy_(Tensor& dst, const Tensor& src) {
  detail::check_defined(dst, "copy_", "dst");
  detail::check_defined(src, "copy_", "src");
  check_inplace_allowed(dst, "copy_");
  dst.impl()->storage->bump_version();
  TESSERA_CHECK(broadcast_shapes(dst.shape(), src.shape(), "copy_") == dst.shape(), "[copy_] source shape ",
                shape_str(src.shape()), " does not broadcast to destination shape ", shape_str(dst.shape()));
  convert_into(dst, src);
}

Tensor contiguous(const Tensor& t) {
  detail::check_defined(t, "contiguous", "t");
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  convert_into(out, t);
  return record(out, "ContiguousBackward", {t}, [](const Tensor& g) { return std::vector<Tensor>{g}; }, autograd::Saves::Nothing);
}

Tensor clone(const Tensor& t) {
  detail::check_defined(t, "clone", "t");
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  convert_into(out, t);
  return record(out, "CloneBackward", {t}, [](const Tensor& g) { return std::vector<Tensor>{g}; }, autograd::Saves::Nothing);
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  detail::check_defined(t, "to", "t");
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  convert_into(out, t);
  return out;  // conversions are not differentiable (only float32 carries gradients)
}

void fill_(Tensor& t, float value) {
  detail::check_defined(t, "fill_", "t");
  check_inplace_allowed(t, "fill_");
  t.impl()->storage->bump_version();
  if (t.dtype() == DType::Float32 && t.is_contiguous()) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
    return;
  }
  Tensor v = Tensor::empty({});
  v.data<float>()[0] = value;
  convert_into(t, v);
}

void add_(Tensor& dst, const Tensor& src, float alpha) {
  detail::check_float(dst, "add_", "dst");
  detail::check_float(src, "add_", "src");
  check_inplace_allowed(dst, "add_");
  dst.impl()->storage->bump_version();
  TESSERA_CHECK(broadcast_shapes(dst.shape(), src.shape(), "add_") == dst.shape(), "[add_] source shape ",
                shape_str(src.shape()), " does not broadcast to destination shape ", shape_str(dst.shape()));
  Shape sst = detail::broadcast_strides(src, dst.shape());
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  cpu::for_each_row<2>(dst.shape(), {&dst.strides(), &sst},
                       [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
                         float* dp = d + off[0];
                         const float* sp = s + off[1];
                         if (st[0] == 1 && st[1] == 1)
                           for (int64_t i = 0; i < n; ++i) dp[i] += alpha * sp[i];
                         else
                           for (int64_t i = 0; i < n; ++i) dp[i * st[0]] += alpha * sp[i * st[1]];
                       });
}

void mul_(Tensor& dst, float value) {
  detail::check_float(dst, "mul_", "dst");
  check_inplace_allowed(dst, "mul_");
  dst.impl()->storage->bump_version();
  float* d = dst.data<float>();
  cpu::for_each_row<1>(dst.shape(), {&dst.strides()},
                       [&](int64_t n, std::array<int64_t, 1> off, std::array<int64_t, 1> st) {
                         for (int64_t i = 0; i < n; ++i) d[off[0] + i * st[0]] *= value;
                       });
}

}  // namespace tessera
