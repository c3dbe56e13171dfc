#include "tessera/backend/cpu/im2col.h"

#include <algorithm>
#include <cstring>

namespace tessera::cpu {

void im2col(const float* image, const ConvGeometry& g, float* columns) {
  const int64_t ohw = g.out_h * g.out_w;
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        float* col = columns + ((c * g.kernel_h + kh) * g.kernel_w + kw) * ohw;
        const float* plane = image + c * g.height * g.width;
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
          float* dst = col + oh * g.out_w;
          if (ih < 0 || ih >= g.height) {
            std::memset(dst, 0, g.out_w * sizeof(float));
            continue;
          }
          const float* src = plane + ih * g.width;
          int64_t iw0 = -g.pad_w + kw * g.dilation_w;
          if (g.stride_w == 1) {
            // Contiguous run: zeros on the left/right padding, a copy in between.
            int64_t lo = std::max<int64_t>(0, -iw0), hi = std::min<int64_t>(g.out_w, g.width - iw0);
            if (hi < lo) hi = lo;
            for (int64_t ow = 0; ow < lo; ++ow) dst[ow] = 0.0f;
            if (hi > lo) std::memcpy(dst + lo, src + iw0 + lo, (hi - lo) * sizeof(float));
            for (int64_t ow = hi; ow < g.out_w; ++ow) dst[ow] = 0.0f;
          } else {
            for (int64_t ow = 0; ow < g.out_w; ++ow) {
              int64_t iw = iw0 + ow * g.stride_w;
              dst[ow] = (iw >= 0 && iw < g.width) ? src[iw] : 0.0f;
            }
          }
        }
      }
}

void col2im(const float* columns, const ConvGeometry& g, float* image) {
  const int64_t ohw = g.out_h * g.out_w;
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t kh = 0; kh < g.kernel_h; ++kh)
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const float* col = columns + ((c * g.kernel_h + kh) * g.kernel_w + kw) * ohw;
        float* plane = image + c * g.height * g.width;
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
          if (ih < 0 || ih >= g.height) continue;
          const float* src = col + oh * g.out_w;
          float* dst = plane + ih * g.width;
          int64_t iw0 = -g.pad_w + kw * g.dilation_w;
          if (g.stride_w == 1) {
            int64_t lo = std::max<int64_t>(0, -iw0), hi = std::min<int64_t>(g.out_w, g.width - iw0);
            for (int64_t ow = lo; ow < hi; ++ow) dst[iw0 + ow] += src[ow];
          } else {
            for (int64_t ow = 0; ow < g.out_w; ++ow) {
              int64_t iw = iw0 + ow * g.stride_w;
              if (iw >= 0 && iw < g.width) dst[iw] += src[ow];
            }
          }
        }
      }
}

}  // namespace tessera::cpu
