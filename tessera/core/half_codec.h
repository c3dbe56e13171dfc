// 2-byte codecs for gradient compression and mixed precision: IEEE 754 binary16 ("fp16") and bfloat16. Both round to
// nearest, ties to even, as the hardware conversions (F16C's vcvtps2ph, PyTorch's .half() and
// .bfloat16()) do, so a hook's result does not depend on which machine encoded it.
//
// fp16 overflow: |x| >= 65520 (65504 plus half an ulp) becomes ±inf, as IEEE and torch .half()
// do, rather than saturating at ±65504: a clipped gradient would silently train on a wrong
// value, while inf reaches the optimizer and loss-scaling code, which already look for non-finite
// gradients. fp16 subnormals (2^-24 .. 2^-14) are kept, not flushed: small gradients are common.
// NaN stays NaN (quiet, sign kept).
#pragma once
#include <cstdint>

namespace tessera {

enum class HalfFormat { Fp16, Bf16 };

uint16_t fp16_from_float(float value);
float fp16_to_float(uint16_t bits);

// dst[i] = encode(src[i]) and back, for n elements.
void encode_half(HalfFormat format, const float* src, uint16_t* dst, int64_t n);
void decode_half(HalfFormat format, const uint16_t* src, float* dst, int64_t n);

// dst[i] = decode(encode(src[i])): src rounded to the format, kept as float32 (dst may be src). What
// fp16 autocast multiplies (autograd/autocast.h).
void round_through_half(HalfFormat format, const float* src, float* dst, int64_t n);

// The unit roundoff (half an ulp, relative) of one encode: 2^-11 for fp16, 2^-8 for bfloat16.
double half_unit_roundoff(HalfFormat format);

}  // namespace tessera
