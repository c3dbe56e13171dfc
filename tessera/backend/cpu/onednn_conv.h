// conv2d forward and backward through oneDNN (Debian's libdnnl, OpenMP runtime: it uses the same
// thread team as the rest of tessera). Measured against our im2col + sgemm path on the CNN benchmark
// (1 thread, batch 128, conv 32→64 3×3 on 14×14): im2col forward 11.8 ms, forward+backward 41.6 ms;
// PyTorch 1.13 (which calls oneDNN) 12.3 and 25.4 ms. The backward's small-K sgemms and col2im are
// what oneDNN's direct kernels avoid, so oneDNN is the default and im2col the fallback.
#pragma once
#include <cstdint>

namespace tessera::cpu {

struct ConvShape {
  int64_t N, C, H, W;          // input, NCHW
  int64_t OC, KH, KW;          // weight (OC, C/groups, KH, KW)
  int64_t OH, OW;              // output
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
  // Mixed precision (autograd/autocast.h): the products' operands (src, weights, diff_dst) are
  // rounded to bf16 by the reorders into oneDNN's layouts; outputs and gradients stay float32.
  bool bf16 = false;
  bool operator==(const ConvShape&) const = default;
};

// All buffers are plain (NCHW / OIHW) float32; reorders to oneDNN's blocked layouts happen inside.
void onednn_conv_forward(const ConvShape& s, const float* src, const float* weights, const float* bias, float* dst);
void onednn_conv_backward_data(const ConvShape& s, const float* diff_dst, const float* weights, float* diff_src);
// diff_bias may be null.
void onednn_conv_backward_weights(const ConvShape& s, const float* src, const float* diff_dst, float* diff_weights,
                                  float* diff_bias);

}  // namespace tessera::cpu
