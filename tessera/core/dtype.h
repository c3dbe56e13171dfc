// Element types. float32 is the compute type; int64 holds labels and indices; bfloat16 and float16
// are storage types (they halve checkpoint and communication bytes) converted to float32 for compute,
// and the precisions mixed precision rounds products' operands to (autograd/autocast.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace tessera {

enum class DType : uint8_t { Float32, Int64, BFloat16, Float16 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Int64: return 8;
    case DType::BFloat16: return 2;
    case DType::Float16: return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Int64: return "int64";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "?";
}

struct BFloat16 {
  uint16_t bits = 0;
};

// IEEE 754 binary16; converted by core/half_codec.h.
struct Half {
  uint16_t bits = 0;
};

// Round to nearest even, as PyTorch and the hardware do; NaN stays NaN (quiet). Written without
// branches, so that loops over it vectorise (the bf16 codec, autocast's operands, the shared-memory
// backend's bf16 sums all convert through here).
inline BFloat16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return BFloat16{static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
}

inline float bf16_to_float(BFloat16 b) {
  uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }

}  // namespace tessera
