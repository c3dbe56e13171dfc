#include "tessera/dist/types.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

namespace {

template <typename T, typename F>
void combine(T* out, const T* a, const T* b, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <typename T>
void reduce_typed(T* out, const T* a, const T* b, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: combine(out, a, b, n, [](T x, T y) { return x + y; }); return;
    case ReduceOp::Max: combine(out, a, b, n, [](T x, T y) { return std::max(x, y); }); return;
    case ReduceOp::Min: combine(out, a, b, n, [](T x, T y) { return std::min(x, y); }); return;
  }
}

void reduce_bf16(BFloat16* out, const BFloat16* a, const BFloat16* b, int64_t n, ReduceOp op) {
  for (int64_t i = 0; i < n; ++i) {
    float x = bf16_to_float(a[i]), y = bf16_to_float(b[i]);
    float r = op == ReduceOp::Max ? std::max(x, y) : op == ReduceOp::Min ? std::min(x, y) : x + y;
    out[i] = float_to_bf16(r);
  }
}

}  // namespace

void reduce_pair(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::Float32:
      reduce_typed(static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), count, op);
      return;
    case DType::Int64:
      reduce_typed(static_cast<int64_t*>(out), static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), count,
                   op);
      return;
    case DType::BFloat16:
      reduce_bf16(static_cast<BFloat16*>(out), static_cast<const BFloat16*>(a), static_cast<const BFloat16*>(b), count,
                  op);
      return;
    case DType::Float16:
      throw NotSupportedError("[collective] float16 is not reduced by tessera's backends; reduce in float32 or bfloat16");
  }
}

void reduce_into(void* out, const void* in, int64_t count, DType dtype, ReduceOp op) {
  reduce_pair(out, out, in, count, dtype, op);
}

void divide_in_place(Buffer data, int64_t divisor) {
  TESSERA_CHECK(divisor > 0, "[divide_in_place] divisor must be positive, got ", divisor);
  switch (data.dtype) {
    case DType::Float32: {
      float* p = data.as<float>();
      // Multiplying by the reciprocal differs from division in the last bit for non-powers of two;
      // divide so that avg equals sum / n exactly as PyTorch computes it.
      for (int64_t i = 0; i < data.count; ++i) p[i] /= static_cast<float>(divisor);
      return;
    }
    case DType::Int64: {
      int64_t* p = data.as<int64_t>();
      for (int64_t i = 0; i < data.count; ++i) p[i] /= divisor;
      return;
    }
    case DType::BFloat16: {
      BFloat16* p = data.as<BFloat16>();
      for (int64_t i = 0; i < data.count; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / static_cast<float>(divisor));
      return;
    }
    case DType::Float16:
      throw NotSupportedError("[collective] float16 is not reduced by tessera's backends; reduce in float32 or bfloat16");
  }
}

}  // namespace tessera::dist
