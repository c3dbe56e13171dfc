// Element conversions on a device. float_to_bfloat16 rounds to nearest, ties to even, NaN kept quiet
// with its sign: bit for bit what the CPU's encode_half(HalfFormat::Bf16, ...) writes (core/half_codec.h),
// so a tensor moved to the GPU and rounded there equals one rounded on the host.
#pragma once
#include <cstdint>

#include "tessera/backend/cuda/device_buffer.h"

namespace tessera::cuda {

// out[i] = bfloat16(in[i]) for n elements: in holds n float32, out room for n bfloat16.
void float_to_bfloat16(const DeviceBuffer& in, DeviceBuffer& out, int64_t n);

}  // namespace tessera::cuda
