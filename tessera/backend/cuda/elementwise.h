// The CUDA backend's elementwise kernels, copies and fused optimizer updates, behind the kernel table
// (backend/cuda/cuda_kernels.cpp turns tensors into these arguments). Plain C++: compiled by nvcc's
// C++17 as well as by the library. Every call runs on the device's compute stream (stream.h) and
// returns once the kernel is issued. Operands are read through element strides over an iteration
// shape of at most kMaxDims dims (stride 0 on a broadcast dim); outputs of the elementwise kernels are
// contiguous.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include "tessera/ops/op_codes.h"
#include "tessera/ops/optimizer_steps.h"

namespace tessera::cuda {

constexpr int kMaxDims = 8;

struct IterationShape {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t numel = 0;
};

struct Strides {
  int64_t of[kMaxDims] = {};
};

enum class ElementType : uint8_t { kFloat32, kInt64, kBFloat16, kFloat16 };

// out[i] = unary_formula<op>(a[...], scalar) for the i-th element of `shape` in row-major order.
void unary(int device, UnaryOp op, float scalar, const float* a, const Strides& a_strides, float* out,
           const IterationShape& shape);
void binary(int device, BinaryOp op, float scalar, const float* a, const Strides& a_strides, const float* b,
            const Strides& b_strides, float* out, const IterationShape& shape);
// dst[...] = convert(src[...]) between any two of the element types (bfloat16 rounded as the CPU
// rounds it, core/dtype.h; float16 to nearest even).
void copy(int device, void* dst, ElementType dst_type, const Strides& dst_strides, const void* src,
          ElementType src_type, const Strides& src_strides, const IterationShape& shape);
// float32 in place.
void fill(int device, float* dst, const Strides& dst_strides, const IterationShape& shape, float value);
void add_scaled(int device, float* dst, const Strides& dst_strides, const float* src, const Strides& src_strides,
                const IterationShape& shape, float alpha);
void scale(int device, float* dst, const Strides& dst_strides, const IterationShape& shape, float value);

// The fused optimizer updates over n contiguous floats (buffers null where the step keeps none).
void sgd_update(int device, float* param, const float* grad, float* momentum_buffer, int64_t n, const SgdStep& step);
void adam_update(int device, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const AdamStep& step);
void lars_update(int device, float* param, const float* grad, float* momentum_buffer, int64_t n, float local_lr,
                 float weight_decay, float momentum);
// LAMB's two passes (cpu_optimizer.cpp's): the moments, returning ||w||² and ||u||² of the direction
// u, each summed in double per block and the blocks' sums added on the host in block order (the same
// sum on every run; waits for the device); then param -= step · u, u recomputed bit for bit.
// Scratch: kLambScratchBytes of device memory for the blocks' sums.
constexpr int kLambBlocks = 1024;
constexpr size_t kLambScratchBytes = 2 * kLambBlocks * sizeof(double);
std::pair<double, double> lamb_moments(int device, const float* param, const float* grad, float* exp_avg,
                                       float* exp_avg_sq, int64_t n, const LambStep& step, void* scratch);
void lamb_apply(int device, float* param, const float* exp_avg, const float* exp_avg_sq, int64_t n,
                const LambStep& step, float scaled_lr);

}  // namespace tessera::cuda

namespace tessera::cuda {

// Row reductions over a contiguous (rows, cols) float32 matrix: out[r] = Σ_c in[r, c].
void sum_rows(int device, const float* in, int64_t rows, int64_t cols, float* out);
// Σ x² of n contiguous floats, accumulated in double (waits for the device: the caller needs the number).
// `scratch`: device memory for kSquaredNormBlocks doubles (the table lends it from the tensor allocator).
constexpr int kSquaredNormBlocks = 1024;
double squared_norm(int device, const float* in, int64_t n, double* scratch);
// Softmax or log-softmax of each row of a contiguous (rows, cols) matrix, and its backward from the
// output and the upstream gradient.
void softmax_rows(int device, const float* in, int64_t rows, int64_t cols, bool log_space, float* out);
void softmax_rows_backward(int device, const float* out, const float* grad, int64_t rows, int64_t cols,
                           bool log_space, float* grad_in);

}  // namespace tessera::cuda
