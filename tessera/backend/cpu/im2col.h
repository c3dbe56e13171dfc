// im2col / col2im for one image (C, H, W) <-> columns (C*KH*KW, OH*OW), as in Caffe and PyTorch's
// slow_conv2d; a convolution becomes one sgemm per image and group.
#pragma once
#include <cstdint>

namespace tessera::cpu {

struct ConvGeometry {
  int64_t channels, height, width;
  int64_t kernel_h, kernel_w;
  int64_t pad_h, pad_w;
  int64_t stride_h, stride_w;
  int64_t dilation_h, dilation_w;
  int64_t out_h, out_w;
};

void im2col(const float* image, const ConvGeometry& g, float* columns);
// Adds the columns back into `image` (which the caller zeroes first).
void col2im(const float* columns, const ConvGeometry& g, float* image);

}  // namespace tessera::cpu
