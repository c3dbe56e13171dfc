// Convolution (cuDNN) and pooling (our kernels) on a device, NCHW, behind the kernel table's
// conv2d and pooling entries (backend/cuda/cuda_kernels.cpp). Plain C++: nvcc's C++17 compiles it
// too. Every call runs on the device's compute stream and returns once the work is queued. The CPU
// functions they must equal are ops/conv.cpp's (tests/backend/cuda/conv_test.cpp).
#pragma once
#include <cstdint>

#include "tessera/backend/cuda/elementwise.h"

namespace tessera::cuda {

// x (N, C, H, W), w (OC, C / groups, KH, KW), y (N, OC, OH, OW), all contiguous.
struct ConvGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t OC = 0, KH = 0, KW = 0;
  int64_t OH = 0, OW = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1, groups = 1;
};

// x, w and y of `type` (float32, or bfloat16 / float16 under autocast), products accumulated in
// float32; float32 on TF32 tensor cores only where `tf32` (train.allow_tf32), else as the CPU's. The
// algorithms are cuDNN's heuristic's first deterministic choice for the shape, remembered: two runs
// give the same bits.
void conv2d_forward(int device, ElementType type, const ConvGeometry& g, const void* x, const void* w, void* y,
                    bool tf32);
// dx = the gradient of x from dy, and dw of w (both overwritten).
void conv2d_backward_data(int device, ElementType type, const ConvGeometry& g, const void* dy, const void* w, void* dx,
                          bool tf32);
void conv2d_backward_filter(int device, ElementType type, const ConvGeometry& g, const void* x, const void* dy,
                            void* dw, bool tf32);

// x (N, C, H, W) -> y (N, C, OH, OW) over windows of kernel_h × kernel_w at the strides, padding
// outside the image (ignored by max, counted as zeros by the average: count_include_pad).
struct PoolGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
};

// Each window's maximum (NaN wins, the first position on ties, as the CPU) of x, or of relu(x)
// where relu_first; argmax: the position within the input plane the value came from (-1 where
// relu_first and the maximum is not above 0: relu's gradient there is 0).
void max_pool2d(int device, const PoolGeometry& g, const float* x, bool relu_first, float* y, int64_t* argmax);
// dx = each window's dy at its argmax, summed where windows overlap (a gather per input element:
// no atomics, the same bits every run).
void max_pool2d_backward(int device, const PoolGeometry& g, const float* dy, const int64_t* argmax, float* dx);
void avg_pool2d(int device, const PoolGeometry& g, const float* x, float* y);
void avg_pool2d_backward(int device, const PoolGeometry& g, const float* dy, float* dx);

}  // namespace tessera::cuda
