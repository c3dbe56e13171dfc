// conv2d forward and backward through oneDNN (Debian's libdnnl, OpenMP runtime: it uses the same
// thread team as the rest of tessera). Measured against our im2col + sgemm path on the CNN benchmark
// (1 thread, batch 128, conv 32→64 3×3 on 14×14): im2col forward 11.8 ms, forward+backward 41.6 ms;
// PyTorch 1.13 (which calls oneDNN) 12.3 and 25.4 ms. The backward's small-K sgemms and col2im are
// what oneDNN's direct kernels avoid, so oneDNN is the default and im2col the fallback.
#pragma once
#include <cstdint>
#include <memory>

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

// The forward's source as its primitive read it: under bf16 a bf16 copy in oneDNN's blocked layout,
// which the weight gradient reads again. Keeping it spares the backward a second conversion of the
// input (on the bf16 CNN, reorders into and out of oneDNN's layouts were 23% of the step, and each
// operand was converted twice). When the forward read the caller's buffer as it was, there is no
// copy (`holds_copy()` is false) and that buffer must outlive this.
struct ConvSource {
  std::shared_ptr<const void> memory;  // a dnnl::memory, kept opaque here
  std::shared_ptr<void> buffer;        // the copy's bytes (cpu_allocator), when it is a copy
  bool holds_copy() const { return buffer != nullptr; }
};

// All buffers are plain (NCHW / OIHW) float32; reorders to oneDNN's blocked layouts happen inside.
// Returns the source for onednn_conv_backward when `keep_source` (an empty one otherwise).
ConvSource onednn_conv_forward(const ConvShape& s, const float* src, const float* weights, const float* bias,
                               float* dst, bool keep_source);
// Both gradients of one convolution, the output gradient converted once for the two products when
// they read it in the same layout. Null outputs are not computed (diff_weights and diff_bias come
// from one primitive: either asks for it).
void onednn_conv_backward(const ConvShape& s, const float* diff_dst, const float* weights, const ConvSource& src,
                          float* diff_src, float* diff_weights, float* diff_bias);

}  // namespace tessera::cpu
