// The CPU table's matrix products, convolution and pooling: the ops themselves (ops/matmul.cpp,
// ops/conv.cpp), which keep their CPU paths outside the table (oneDNN's batched products and direct
// convolutions, bf16 operands rounded once and kept for the backward, gradients written into DDP's
// buckets, the CNN's fused relu + pooling). These entries answer through those ops, so that code
// written against the table, and the GPU tests' comparisons, can ask the CPU what they ask a device.
// A backward entry runs the op's own backward on fresh leaves.
#include "tessera/autograd/autocast.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/backend/cpu/cpu_kernels.h"

namespace tessera::cpu {
namespace {

// Records history inside the scope (a backward entry may be called where recording is off).
class RecordingOn {
 public:
  RecordingOn() : previous_(autograd::grad_enabled()) { autograd::set_grad_enabled(true); }
  ~RecordingOn() { autograd::set_grad_enabled(previous_); }
  RecordingOn(const RecordingOn&) = delete;
  RecordingOn& operator=(const RecordingOn&) = delete;

 private:
  bool previous_;
};

Tensor leaf(const Tensor& t, bool requires_grad) { return t.detach().set_requires_grad(requires_grad); }

}  // namespace

Tensor CpuKernels::matmul(const Tensor& a, const Tensor& b, const Tensor& bias, DType precision) const {
  NoGradGuard no_grad;
  Autocast as_asked(precision);
  Tensor out = tessera::matmul(a, b);
  return bias.defined() ? add(out, bias) : out;
}

Tensor CpuKernels::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& opt,
                          DType precision) const {
  NoGradGuard no_grad;
  Autocast as_asked(precision);
  return tessera::conv2d(x, weight, bias, opt);
}

LayerGrads CpuKernels::conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& g, const Conv2dOptions& opt,
                                       DType precision, bool input_grad, bool weight_grad, bool bias_grad) const {
  RecordingOn recording;
  Autocast as_asked(precision);
  Tensor xl = leaf(x, input_grad), wl = leaf(weight, weight_grad);
  // The bias's value does not enter any gradient: a zero leaf stands in for it.
  Tensor bl = bias_grad ? leaf(zeros({weight.shape()[0]}), true) : Tensor();
  tessera::conv2d(xl, wl, bl, opt).backward(g);
  return {input_grad ? xl.grad() : Tensor(), weight_grad ? wl.grad() : Tensor(), bias_grad ? bl.grad() : Tensor()};
}

WithSaved CpuKernels::max_pool2d(const Tensor& x, const Pool2dOptions& opt, bool relu_first) const {
  NoGradGuard no_grad;
  return {relu_first ? tessera::relu_max_pool2d(x, opt) : tessera::max_pool2d(x, opt), x};  // saved: the input
}

Tensor CpuKernels::max_pool2d_backward(const Tensor& g, const Tensor& saved, const Shape& in_shape,
                                       const Pool2dOptions& opt, bool relu_first) const {
  RecordingOn recording;
  Tensor xl = leaf(saved, true);
  (relu_first ? tessera::relu_max_pool2d(xl, opt) : tessera::max_pool2d(xl, opt)).backward(g);
  return xl.grad();
}

Tensor CpuKernels::avg_pool2d(const Tensor& x, const Pool2dOptions& opt) const {
  NoGradGuard no_grad;
  return tessera::avg_pool2d(x, opt);
}

Tensor CpuKernels::avg_pool2d_backward(const Tensor& g, const Shape& in_shape, const Pool2dOptions& opt) const {
  RecordingOn recording;
  Tensor xl = leaf(zeros(in_shape), true);  // the average's gradient does not depend on the values
  tessera::avg_pool2d(xl, opt).backward(g);
  return xl.grad();
}

}  // namespace tessera::cpu
