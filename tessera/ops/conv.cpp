// conv2d as im2col + one sgemm per image and group, images split across the thread pool (OpenBLAS runs
// single-threaded inside our parallel region, so each core owns whole images and their columns stay
// in its cache). Pooling is a direct loop over (image, channel) planes. On a device, convolution and
// pooling are its kernel table's (cuDNN and our pooling kernels on CUDA), backward included.
#include <cmath>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>
#include <limits>
#include <mutex>
#include <vector>

#include "tessera/autograd/autocast.h"
#include "tessera/backend/cpu/gemm.h"
#include "tessera/backend/cpu/im2col.h"
#include "tessera/backend/cpu/onednn_conv.h"
#include "tessera/backend/cpu/vector_math.h"
#include "tessera/core/half_codec.h"
#include "tessera/ops/detail.h"
#include "tessera/ops/kernels.h"
#include "tessera/util/thread_pool.h"
#include "tessera/util/settings.h"

namespace tessera {

using autograd::record;

namespace {

// 0 when the window does not fit in the padded input: C++ division truncates toward zero, so the
// formula alone gave 1 for a 2x2 window over a 1x1 input, and max-pooling then read past the plane.
int64_t out_size(int64_t in, int64_t pad, int64_t dilation, int64_t kernel, int64_t stride) {
  const int64_t room = in + 2 * pad - dilation * (kernel - 1) - 1;
  return room < 0 ? 0 : room / stride + 1;
}

struct ConvPlan {
  cpu::ConvGeometry geo;  // per group: channels = C / groups
  int64_t N, C, OC, groups;
  int64_t ck, ohw;        // rows of a group's columns; output pixels
};

ConvPlan plan_conv(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  const char* op = "conv2d";
  TESSERA_CHECK(x.dim() == 4, "[", op, "] input must be (N, C, H, W), got ", shape_str(x.shape()));
  TESSERA_CHECK(w.dim() == 4, "[", op, "] weight must be (OC, C/groups, KH, KW), got ", shape_str(w.shape()));
  TESSERA_CHECK(o.groups >= 1 && o.stride_h >= 1 && o.stride_w >= 1 && o.dilation_h >= 1 && o.dilation_w >= 1 &&
                    o.pad_h >= 0 && o.pad_w >= 0,
                "[", op, "] invalid options: stride, dilation and groups must be >= 1 and padding >= 0");
  int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  int64_t OC = w.shape()[0], KH = w.shape()[2], KW = w.shape()[3];
  TESSERA_CHECK(C % o.groups == 0 && OC % o.groups == 0, "[", op, "] channels ", C, " and out channels ", OC,
                " must be divisible by groups ", o.groups);
  TESSERA_CHECK(w.shape()[1] == C / o.groups, "[", op, "] weight ", shape_str(w.shape()), " expects ",
                w.shape()[1] * o.groups, " input channels but input ", shape_str(x.shape()), " has ", C);
  int64_t OH = out_size(H, o.pad_h, o.dilation_h, KH, o.stride_h), OW = out_size(W, o.pad_w, o.dilation_w, KW, o.stride_w);
  TESSERA_CHECK(OH > 0 && OW > 0, "[", op, "] kernel ", KH, "x", KW, " is larger than the padded input ",
                shape_str(x.shape()));
  ConvPlan p;
  p.geo = {C / o.groups, H, W, KH, KW, o.pad_h, o.pad_w, o.stride_h, o.stride_w, o.dilation_h, o.dilation_w, OH, OW};
  p.N = N;
  p.C = C;
  p.OC = OC;
  p.groups = o.groups;
  p.ck = p.geo.channels * KH * KW;
  p.ohw = OH * OW;
  return p;
}

cpu::MatrixRef mat(const float* data, int64_t rows, int64_t cols) { return {data, rows, cols, cols, 1}; }
cpu::MatrixRef mat_t(const float* data, int64_t rows, int64_t cols) { return {data, cols, rows, 1, cols}; }

cpu::ConvShape onednn_shape(const ConvPlan& p, const Tensor& w, bool bf16) {
  const auto& g = p.geo;
  return {p.N, p.C, g.height, g.width, p.OC, w.shape()[2], w.shape()[3], g.out_h, g.out_w,
          g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h, g.dilation_w, p.groups, bf16};
}

// The operand as fp16 autocast multiplies it: a contiguous float32 copy holding fp16 values (one
// pass, core/half_codec.h).
Tensor rounded_to_fp16(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor out = clone(t);
  round_through_half(HalfFormat::Fp16, out.data<float>(), out.data<float>(), out.numel());
  return out;
}

// `precision`: Float32; BFloat16 (oneDNN's bf16 kernels round the operands); Float16 (the operands,
// and the backward's output gradient, rounded to fp16 values first: autograd/autocast.h).
Tensor conv2d_onednn(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const ConvPlan& p, DType precision) {
  const bool fp16 = precision == DType::Float16;
  Tensor x = fp16 ? rounded_to_fp16(x_in) : detail::as_contiguous(x_in);
  Tensor w = fp16 ? rounded_to_fp16(w_in) : detail::as_contiguous(w_in);
  Tensor b = bias.defined() ? detail::as_contiguous(bias) : Tensor();
  cpu::ConvShape shape = onednn_shape(p, w, precision == DType::BFloat16);
  Tensor out = Tensor::empty({p.N, p.OC, p.geo.out_h, p.geo.out_w});
  bool gx = x_in.requires_grad(), gw = w_in.requires_grad(), gb = bias.defined() && bias.requires_grad();
  const cpu::ConvSource source = cpu::onednn_conv_forward(
      shape, x.data<float>(), w.data<float>(), b.defined() ? b.data<float>() : nullptr, out.data<float>(), gw || gb);
  // The backward keeps the forward's converted source, and x only when the forward read x in place.
  const Tensor x_read = source.holds_copy() ? Tensor() : x;
  const Shape x_shape = x.shape();
  return record(out, "Conv2dBackward", {x_in, w_in, bias},
                [x_read, x_shape, source, w, shape, gx, gw, gb, fp16](const Tensor& g_in) {
    static_cast<void>(x_read);  // held, not read here: `source` may point into it
    Tensor g = fp16 ? rounded_to_fp16(g_in) : detail::as_contiguous(g_in);
    Tensor grad_x = gx ? Tensor::empty(x_shape) : Tensor();
    Tensor grad_w = gw ? Tensor::empty(w.shape()) : Tensor(), grad_b = gb ? Tensor::empty({shape.OC}) : Tensor();
    cpu::onednn_conv_backward(shape, g.data<float>(), w.data<float>(), source, gx ? grad_x.data<float>() : nullptr,
                              gw ? grad_w.data<float>() : nullptr, gb ? grad_b.data<float>() : nullptr);
    return std::vector<Tensor>{grad_x, grad_w, grad_b};
  });
}

std::atomic<ConvAlgorithm>& algorithm_setting() {
  static std::atomic<ConvAlgorithm> setting = [] {
    const char* env = env_setting("TESSERA_CONV");
    if (!env || std::string(env) == "onednn") return ConvAlgorithm::OneDnn;
    TESSERA_CHECK(std::string(env) == "im2col", "[TESSERA_CONV] expected 'onednn' or 'im2col', got '", env, "'");
    return ConvAlgorithm::Im2col;
  }();
  return setting;
}

}  // namespace

void set_conv_algorithm(ConvAlgorithm algorithm) { algorithm_setting() = algorithm; }
ConvAlgorithm conv_algorithm() { return algorithm_setting(); }

namespace {

// conv2d on a device: its kernel table's convolution (cuDNN on CUDA), forward and backward, in
// autocast's precision.
Tensor conv2d_on_device(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const Conv2dOptions& opt) {
  const DType precision = autocast_dtype();
  const Kernels& kernels = kernels_for(x_in);
  Tensor x, w, out;
  {
    NoGradGuard no_grad;
    x = detail::as_contiguous(x_in), w = detail::as_contiguous(w_in);
    out = kernels.conv2d(x, w, bias.defined() ? detail::as_contiguous(bias) : Tensor(), opt, precision);
  }
  const bool gx = x_in.requires_grad(), gw = w_in.requires_grad(), gb = bias.defined() && bias.requires_grad();
  return record(out, "Conv2dBackward", {x_in, w_in, bias}, [&kernels, x, w, opt, precision, gx, gw, gb](const Tensor& g) {
    LayerGrads grads = kernels.conv2d_backward(x, w, g, opt, precision, gx, gw, gb);
    return std::vector<Tensor>{grads.x, grads.weight, grads.bias};
  });
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const Conv2dOptions& opt) {
  detail::check_float(x_in, "conv2d", "input");
  detail::check_float(w_in, "conv2d", "weight");
  detail::check_same_device(x_in, w_in, "conv2d");
  ConvPlan p = plan_conv(x_in, w_in, opt);
  if (bias.defined()) {
    detail::check_float(bias, "conv2d", "bias");
    detail::check_same_device(x_in, bias, "conv2d");
    TESSERA_CHECK(bias.dim() == 1 && bias.shape()[0] == p.OC, "[conv2d] bias ", shape_str(bias.shape()),
                  " does not match ", p.OC, " output channels");
  }
  if (!x_in.device().is_cpu()) return conv2d_on_device(x_in, w_in, bias, opt);
  // Mixed precision always runs on oneDNN (im2col is the float32 fallback).
  const DType precision = autocast_dtype();
  if (p.N > 0 && (precision != DType::Float32 || conv_algorithm() == ConvAlgorithm::OneDnn))
    return conv2d_onednn(x_in, w_in, bias, p, precision);
  Tensor x = detail::as_contiguous(x_in), w = detail::as_contiguous(w_in);
  Tensor b = bias.defined() ? detail::as_contiguous(bias) : Tensor();
  Tensor out = Tensor::empty({p.N, p.OC, p.geo.out_h, p.geo.out_w});
  const int64_t G = p.groups, ocg = p.OC / G, in_image = p.C * p.geo.height * p.geo.width;
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* op = out.data<float>();
  const float* bp = b.defined() ? b.data<float>() : nullptr;
  parallel_for(0, p.N, 1, [&](int64_t n0, int64_t n1) {
    std::vector<float> cols(p.ck * G * p.ohw);
    for (int64_t n = n0; n < n1; ++n) {
      float* o = op + n * p.OC * p.ohw;
      for (int64_t g = 0; g < G; ++g) {
        cpu::im2col(xp + n * in_image + g * p.geo.channels * p.geo.height * p.geo.width, p.geo,
                    cols.data() + g * p.ck * p.ohw);
        float beta = 0.0f;
        if (bp) {
          for (int64_t c = g * ocg; c < (g + 1) * ocg; ++c) std::fill(o + c * p.ohw, o + (c + 1) * p.ohw, bp[c]);
          beta = 1.0f;
        }
        cpu::gemm(mat(wp + g * ocg * p.ck, ocg, p.ck), mat(cols.data() + g * p.ck * p.ohw, p.ck, p.ohw),
                  o + g * ocg * p.ohw, p.ohw, 1.0f, beta);
      }
    }
  });
  bool gx = x_in.requires_grad(), gw = w_in.requires_grad(), gb = bias.defined() && bias.requires_grad();
  return record(out, "Conv2dBackward", {x_in, w_in, bias}, [x, w, p, gx, gw, gb](const Tensor& g_in) {
    Tensor g = detail::as_contiguous(g_in);
    Tensor grad_x = gx ? zeros(x.shape()) : Tensor();
    Tensor grad_w = gw ? zeros(w.shape()) : Tensor();
    Tensor grad_b = gb ? zeros({p.OC}) : Tensor();
    const float* gp = g.data<float>();
    if (gb) {  // a direct loop: sum(g, {0, 2, 3}) would first permute g into a copy
      float* db = grad_b.data<float>();
      for (int64_t n = 0; n < p.N; ++n)
        for (int64_t oc = 0; oc < p.OC; ++oc) {
          const float* row = gp + (n * p.OC + oc) * p.ohw;
          float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
          for (int64_t k = 0; k < p.ohw; ++k) acc += row[k];
          db[oc] += acc;
        }
    }
    const int64_t G = p.groups, ocg = p.OC / G, in_image = p.C * p.geo.height * p.geo.width;
    const int64_t group_image = p.geo.channels * p.geo.height * p.geo.width;
    const float* xp = x.data<float>();
    const float* wp = w.data<float>();
    std::mutex merge;
    if (gx || gw) {
      parallel_for(0, p.N, 1, [&](int64_t n0, int64_t n1) {
        std::vector<float> cols(p.ck * p.ohw);
        std::vector<float> partial_w(gw ? w.numel() : 0, 0.0f);
        for (int64_t n = n0; n < n1; ++n) {
          const float* go = gp + n * p.OC * p.ohw;
          for (int64_t grp = 0; grp < G; ++grp) {
            const float* go_g = go + grp * ocg * p.ohw;  // (ocg, ohw)
            if (gw) {
              // dW_g (ocg, ck) += dY_g (ocg, ohw) @ cols (ohw, ck)ᵀ
              cpu::im2col(xp + n * in_image + grp * group_image, p.geo, cols.data());
              cpu::gemm(mat(go_g, ocg, p.ohw), mat_t(cols.data(), p.ck, p.ohw), partial_w.data() + grp * ocg * p.ck,
                        p.ck, 1.0f, 1.0f);
            }
            if (gx) {
              // dcols (ck, ohw) = W_g (ocg, ck)ᵀ @ dY_g (ocg, ohw), then fold back into the image.
              cpu::gemm(mat_t(wp + grp * ocg * p.ck, ocg, p.ck), mat(go_g, ocg, p.ohw), cols.data(), p.ohw);
              cpu::col2im(cols.data(), p.geo, grad_x.data<float>() + n * in_image + grp * group_image);
            }
          }
        }
        if (gw) {
          std::lock_guard<std::mutex> lock(merge);
          float* dw = grad_w.data<float>();
          for (size_t i = 0; i < partial_w.size(); ++i) dw[i] += partial_w[i];
        }
      });
    }
    return std::vector<Tensor>{grad_x, grad_w, grad_b};
  });
}

namespace {

struct PoolPlan {
  int64_t N, C, H, W, OH, OW;
};

bool is_2x2_stride_2(const Pool2dOptions& o) {
  return o.kernel_h == 2 && o.kernel_w == 2 && o.stride_h == 2 && o.stride_w == 2 && o.pad_h == 0 && o.pad_w == 0;
}

PoolPlan plan_pool(const Tensor& x, const Pool2dOptions& o, const char* op) {
  TESSERA_CHECK(x.dim() == 4, "[", op, "] input must be (N, C, H, W), got ", shape_str(x.shape()));
  TESSERA_CHECK(o.kernel_h >= 1 && o.kernel_w >= 1 && o.stride_h >= 1 && o.stride_w >= 1 && o.pad_h >= 0 &&
                    o.pad_w >= 0,
                "[", op, "] kernel and stride must be >= 1 and padding >= 0");
  TESSERA_CHECK(o.pad_h * 2 <= o.kernel_h && o.pad_w * 2 <= o.kernel_w, "[", op,
                "] padding must be at most half the kernel size");
  PoolPlan p{x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], 0, 0};
  p.OH = out_size(p.H, o.pad_h, 1, o.kernel_h, o.stride_h);
  p.OW = out_size(p.W, o.pad_w, 1, o.kernel_w, o.stride_w);
  TESSERA_CHECK(p.OH > 0 && p.OW > 0, "[", op, "] kernel ", o.kernel_h, "x", o.kernel_w,
                " is larger than the padded input ", shape_str(x.shape()));
  return p;
}

// 2x2/stride-2 windows over planes of even sides tile each plane: every element is in one window.
bool windows_tile_planes(const PoolPlan& p, const Pool2dOptions& o) {
  return is_2x2_stride_2(o) && p.H % 2 == 0 && p.W % 2 == 0;
}

// relu(v) as the bits of a float: v's when v > 0 (bits 1 to 0x7F800000, +inf included), else +0's
// (negative numbers and -0 carry the sign bit; NaN's bits lie above +inf's). relu's values are never
// negative or NaN, so their bits order as the floats do, and integer compares vectorise where float
// compares do not: under -ftrapping-math GCC will not if-convert those.
inline int32_t relu_bits(float v) {
  // Unsigned arithmetic: -0's bits are INT32_MIN, and subtracting 1 from it as int32 overflows.
  const auto bits = std::bit_cast<uint32_t>(v);
  return bits - 1u < 0x7F800000u ? static_cast<int32_t>(bits) : 0;
}

// relu then 2x2/stride-2 max-pooling of one plane with even sides, in two loops that GCC
// vectorises. The window-by-window loop ran scalar and branched (a row of 14 or 7 windows is too
// short for 8-wide vectors): it was 12% of the CNN's bf16 step, and this is 2.6-3x faster on the
// CNN's planes (28x28 and 14x14). First the larger of each column's two rows, then of each pair of
// neighbours in that, the plane as one flat loop. The argmax is the first maximum in the order
// top-left, top-right, bottom-left, bottom-right, as the window-by-window loop's (relu leaves no NaN
// to order). window_top[i] is window i's top-left element.
void relu_max_pool_2x2_plane(const float* in, int64_t H, int64_t W, const int32_t* window_top, int32_t* column_max,
                             int32_t* column_bottom, float* out, int32_t* arg) {
  const int64_t OH = H / 2, OW = W / 2;
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = in + 2 * oh * W;
    const float* r1 = r0 + W;
    int32_t* cm = column_max + oh * W;
    int32_t* cb = column_bottom + oh * W;
    for (int64_t w = 0; w < W; ++w) {
      const int32_t top = relu_bits(r0[w]), bottom = relu_bits(r1[w]);
      const bool below = bottom > top;
      cm[w] = below ? bottom : top;
      cb[w] = below ? 1 : 0;
    }
  }
  const auto w32 = static_cast<int32_t>(W);
  for (int64_t i = 0; i < OH * OW; ++i) {
    const int32_t left = column_max[2 * i], right = column_max[2 * i + 1];
    const int32_t left_bottom = column_bottom[2 * i], right_bottom = column_bottom[2 * i + 1];
    // On a tie the right column wins only with its top against the left's bottom (top-right comes
    // before bottom-left).
    const bool take_right = right > left || (right == left && left_bottom > right_bottom);
    const int32_t best = take_right ? right : left;
    const int32_t at = window_top[i] + (take_right ? 1 : 0) + (take_right ? right_bottom : left_bottom) * w32;
    out[i] = std::bit_cast<float>(best);
    arg[i] = best > 0 ? at : -1;
  }
}

// The gradient of 2x2/stride-2 max-pooling for one plane its windows tile, in two loops that GCC
// vectorises, as the forward's: first each window's gradient goes to its top pair or bottom pair of
// elements (a row of windows gives a row of W "upper" and of W "lower" values; all windows as one
// flat loop), then those rows are copied into the plane in order. The row-by-row loop it replaces ran
// over rows of 14 and 7 windows, too short for 8-wide vectors (8.6% of the CNN's bf16 step). An
// argmax of -1 (relu_max_pool2d's "nothing positive") matches no element.
void max_pool_2x2_backward_plane(const float* g, const int32_t* arg, const int32_t* window_top, int64_t W, int64_t OH,
                                 int64_t OW, float* upper, float* lower, float* d) {
  const auto w32 = static_cast<int32_t>(W);
  for (int64_t i = 0; i < OH * OW; ++i) {
    const int32_t at = arg[i] - window_top[i];  // 0, 1, W or W + 1 within the window
    const float gi = g[i];
    upper[2 * i] = at == 0 ? gi : 0.0f;
    upper[2 * i + 1] = at == 1 ? gi : 0.0f;
    lower[2 * i] = at == w32 ? gi : 0.0f;
    lower[2 * i + 1] = at == w32 + 1 ? gi : 0.0f;
  }
  for (int64_t oh = 0; oh < OH; ++oh) {
    std::copy(upper + oh * W, upper + (oh + 1) * W, d + 2 * oh * W);
    std::copy(lower + oh * W, lower + (oh + 1) * W, d + (2 * oh + 1) * W);
  }
}

// Window i's top-left element within its plane, for 2x2/stride-2 windows that tile the plane.
std::vector<int32_t> window_tops(const PoolPlan& p) {
  std::vector<int32_t> top(static_cast<size_t>(p.OH * p.OW));
  for (int64_t oh = 0; oh < p.OH; ++oh)
    for (int64_t ow = 0; ow < p.OW; ++ow) top[static_cast<size_t>(oh * p.OW + ow)] = static_cast<int32_t>(2 * oh * p.W + 2 * ow);
  return top;
}

// The windows of one (image, channel) plane after another, each window's maximum and where it is.
// kReluFirst pools relu(x) read on the fly (cpu::relu_value, as relu's own kernel), and marks a
// window whose maximum is not positive with argmax -1: ReLU's gradient is 0 there.
template <bool kReluFirst>
void max_pool_planes(const float* xp, const PoolPlan& p, const Pool2dOptions& o, float* op, int32_t* ap) {
  if (kReluFirst && windows_tile_planes(p, o)) {
    const std::vector<int32_t> window_top = window_tops(p);
    parallel_for(0, p.N * p.C, 16, [&](int64_t b, int64_t e) {
      std::vector<int32_t> column_max(p.OH * p.W), column_bottom(p.OH * p.W);
      for (int64_t plane = b; plane < e; ++plane)
        relu_max_pool_2x2_plane(xp + plane * p.H * p.W, p.H, p.W, window_top.data(), column_max.data(),
                                column_bottom.data(), op + plane * p.OH * p.OW, ap + plane * p.OH * p.OW);
    });
    return;
  }
  const auto value = [](float v) { return kReluFirst ? cpu::relu_value(v) : v; };
  // The common 2x2/stride-2 window without padding gets a branch-light loop (4x fewer instructions
  // than the general one, measured with callgrind on the CNN benchmark).
  const bool k2s2 = is_2x2_stride_2(o);
  parallel_for(0, p.N * p.C, 16, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const float* in = xp + plane * p.H * p.W;
      if (k2s2) {
        for (int64_t oh = 0; oh < p.OH; ++oh) {
          const float* r0 = in + 2 * oh * p.W;
          const float* r1 = r0 + p.W;
          float* orow = op + (plane * p.OH + oh) * p.OW;
          int32_t* arow = ap + (plane * p.OH + oh) * p.OW;
          for (int64_t ow = 0; ow < p.OW; ++ow) {
            const int64_t c = 2 * ow;
            const int32_t top = static_cast<int32_t>(2 * oh * p.W + c), bottom = static_cast<int32_t>(top + p.W);
            float best = value(r0[c]);
            int32_t arg = top;
            if (!(value(r0[c + 1]) <= best)) { best = value(r0[c + 1]); arg = top + 1; }  // "!(<=)" lets NaN win
            if (!(value(r1[c]) <= best)) { best = value(r1[c]); arg = bottom; }
            if (!(value(r1[c + 1]) <= best)) { best = value(r1[c + 1]); arg = bottom + 1; }
            orow[ow] = best;
            arow[ow] = kReluFirst && !(best > 0.0f) ? -1 : arg;
          }
        }
        continue;
      }
      for (int64_t oh = 0; oh < p.OH; ++oh)
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int32_t arg = -1;
          for (int64_t kh = 0; kh < o.kernel_h; ++kh) {
            int64_t ih = oh * o.stride_h - o.pad_h + kh;
            if (ih < 0 || ih >= p.H) continue;
            for (int64_t kw = 0; kw < o.kernel_w; ++kw) {
              int64_t iw = ow * o.stride_w - o.pad_w + kw;
              if (iw < 0 || iw >= p.W) continue;
              float v = value(in[ih * p.W + iw]);
              if (v > best || arg < 0 || std::isnan(v)) {
                best = v;
                arg = static_cast<int32_t>(ih * p.W + iw);
              }
            }
          }
          int64_t i = (plane * p.OH + oh) * p.OW + ow;
          op[i] = best;
          ap[i] = kReluFirst && !(best > 0.0f) ? -1 : arg;
        }
    }
  });
}

// max_pool2d, of relu(x) when relu_first; the backward sends each window's gradient to its argmax
// (none where the argmax is -1).
Tensor max_pool2d_of(const Tensor& x_in, const Pool2dOptions& o, bool relu_first, const char* op) {
  detail::check_float(x_in, op, "input");
  PoolPlan p = plan_pool(x_in, o, op);
  if (!x_in.device().is_cpu()) {  // the device's kernel table: its own argmax, saved for the backward
    const Kernels& kernels = kernels_for(x_in);
    WithSaved r;
    {
      NoGradGuard no_grad;
      r = kernels.max_pool2d(detail::as_contiguous(x_in), o, relu_first);
    }
    const Shape in_shape = x_in.shape();
    return record(r.out, relu_first ? "ReluMaxPool2dBackward" : "MaxPool2dBackward", {x_in},
                  [&kernels, saved = r.saved, in_shape, o, relu_first](const Tensor& g) {
                    return std::vector<Tensor>{kernels.max_pool2d_backward(g, saved, in_shape, o, relu_first)};
                  }, autograd::Saves::Nothing);
  }
  Tensor x = detail::as_contiguous(x_in);
  Tensor out = Tensor::empty({p.N, p.C, p.OH, p.OW});
  // Argmax within each input plane, for the backward scatter.
  auto argmax = std::make_shared<std::vector<int32_t>>(out.numel());
  if (relu_first)
    max_pool_planes<true>(x.data<float>(), p, o, out.data<float>(), argmax->data());
  else
    max_pool_planes<false>(x.data<float>(), p, o, out.data<float>(), argmax->data());
  // Where the windows tile the planes every input element is written once (gradient or 0) and the
  // gradient needs no zero fill first; other windows scatter-add into zeros.
  const bool tiles = windows_tile_planes(p, o);
  Shape in_shape = x.shape();
  return record(out, relu_first ? "ReluMaxPool2dBackward" : "MaxPool2dBackward", {x_in},
                [in_shape, p, argmax, tiles](const Tensor& g_in) {
    Tensor g = detail::as_contiguous(g_in);
    Tensor grad = tiles ? Tensor::empty(in_shape) : zeros(in_shape);
    const float* gp = g.data<float>();
    float* dp = grad.data<float>();
    const int32_t* ap = argmax->data();
    const std::vector<int32_t> window_top = tiles ? window_tops(p) : std::vector<int32_t>();
    parallel_for(0, p.N * p.C, 16, [&](int64_t b, int64_t e) {
      std::vector<float> upper(tiles ? p.OH * p.W : 0), lower(upper.size());
      for (int64_t plane = b; plane < e; ++plane) {
        float* d = dp + plane * p.H * p.W;
        const int64_t first = plane * p.OH * p.OW;
        if (tiles) {
          max_pool_2x2_backward_plane(gp + first, ap + first, window_top.data(), p.W, p.OH, p.OW, upper.data(),
                                      lower.data(), d);
          continue;
        }
        for (int64_t i = first; i < first + p.OH * p.OW; ++i)
          if (ap[i] >= 0) d[ap[i]] += gp[i];
      }
    });
    return std::vector<Tensor>{grad};
  }, autograd::Saves::Nothing);
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) { return max_pool2d_of(x, o, false, "max_pool2d"); }

Tensor relu_max_pool2d(const Tensor& x, const Pool2dOptions& o) { return max_pool2d_of(x, o, true, "relu_max_pool2d"); }

Tensor avg_pool2d(const Tensor& x_in, const Pool2dOptions& o) {
  detail::check_float(x_in, "avg_pool2d", "input");
  PoolPlan p = plan_pool(x_in, o, "avg_pool2d");
  if (!x_in.device().is_cpu()) {
    const Kernels& kernels = kernels_for(x_in);
    Tensor out;
    {
      NoGradGuard no_grad;
      out = kernels.avg_pool2d(detail::as_contiguous(x_in), o);
    }
    const Shape in_shape = x_in.shape();
    return record(out, "AvgPool2dBackward", {x_in}, [&kernels, in_shape, o](const Tensor& g) {
      return std::vector<Tensor>{kernels.avg_pool2d_backward(g, in_shape, o)};
    }, autograd::Saves::Nothing);
  }
  Tensor x = detail::as_contiguous(x_in);
  Tensor out = zeros({p.N, p.C, p.OH, p.OW});
  const float scale = 1.0f / static_cast<float>(o.kernel_h * o.kernel_w);
  // Visits every (output, input) pair inside the image: f(out_index, in_index) within one plane.
  auto for_each_window = [p, o](int64_t plane_out, int64_t plane_in, auto&& f) {
    for (int64_t oh = 0; oh < p.OH; ++oh)
      for (int64_t ow = 0; ow < p.OW; ++ow)
        for (int64_t kh = 0; kh < o.kernel_h; ++kh) {
          int64_t ih = oh * o.stride_h - o.pad_h + kh;
          if (ih < 0 || ih >= p.H) continue;
          for (int64_t kw = 0; kw < o.kernel_w; ++kw) {
            int64_t iw = ow * o.stride_w - o.pad_w + kw;
            if (iw >= 0 && iw < p.W) f(plane_out + oh * p.OW + ow, plane_in + ih * p.W + iw);
          }
        }
  };
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  parallel_for(0, p.N * p.C, 16, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane)
      for_each_window(plane * p.OH * p.OW, plane * p.H * p.W,
                      [&](int64_t oi, int64_t ii) { op[oi] += xp[ii] * scale; });
  });
  Shape in_shape = x.shape();
  return record(out, "AvgPool2dBackward", {x_in}, [in_shape, p, scale, for_each_window](const Tensor& g_in) {
    Tensor g = detail::as_contiguous(g_in);
    Tensor grad = zeros(in_shape);
    const float* gp = g.data<float>();
    float* dp = grad.data<float>();
    parallel_for(0, p.N * p.C, 16, [&](int64_t b, int64_t e) {
      for (int64_t plane = b; plane < e; ++plane)
        for_each_window(plane * p.OH * p.OW, plane * p.H * p.W,
                        [&](int64_t oi, int64_t ii) { dp[ii] += gp[oi] * scale; });
    });
    return std::vector<Tensor>{grad};
  }, autograd::Saves::Nothing);
}

}  // namespace tessera
