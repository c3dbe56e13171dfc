// Every op as a free function: validate (errors name the op and the shapes), compute on the CPU
// backend, and record the backward formula when an input requires grad. Backward formulas live beside
// their forwards in the ops/*.cpp files.
#pragma once
#include <optional>
#include <utility>
#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/optimizer_steps.h"

namespace tessera {

// ---- factories ----
Tensor zeros(const Shape& shape, DType dtype = DType::Float32);
Tensor ones(const Shape& shape, DType dtype = DType::Float32);
Tensor full(const Shape& shape, float value, DType dtype = DType::Float32);
// Shaped, typed and placed like `t` (on its device).
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor arange(int64_t end, DType dtype = DType::Int64);
Tensor from_vector(const std::vector<float>& values, const Shape& shape);
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);
Tensor scalar_tensor(float value);
Tensor randn(const Shape& shape, Generator& gen = default_generator());
Tensor rand(const Shape& shape, Generator& gen = default_generator());  // uniform [0, 1)
Tensor uniform(const Shape& shape, float low, float high, Generator& gen = default_generator());
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen = default_generator());

// ---- copies and conversions ----
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);
Tensor to_dtype(const Tensor& t, DType dtype);
// `t` on `device` (a copy; `t` itself where it is there already), with its dtype and shape, contiguous.
// Differentiable: the gradient goes back to t's device. A CUDA tensor must be contiguous for now (no
// strided copy kernel yet: NotSupportedError says so).
Tensor to_device(const Tensor& t, Device device);
// In place, no autograd: dst (any strides) = src broadcast to dst's shape.
void copy_(Tensor& dst, const Tensor& src);
void fill_(Tensor& t, float value);
// In place, no autograd: dst += alpha * src (src broadcast to dst's shape).
void add_(Tensor& dst, const Tensor& src, float alpha = 1.0f);
void mul_(Tensor& dst, float value);

// ---- views (share storage; backward maps the gradient back) ----
Tensor reshape(const Tensor& t, const Shape& shape);  // a view when possible, else a copy
Tensor view(const Tensor& t, const Shape& shape);     // must be a view
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& t, const Shape& dims);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& t, const Shape& shape);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
// Sums `t` over broadcast dimensions so that it has `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& t, const Shape& shape);

// ---- elementwise (broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, float b);
Tensor mul(const Tensor& a, float b);
Tensor pow(const Tensor& a, float exponent);
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor gelu(const Tensor& a);  // exact (erf) form, PyTorch's default
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);  // condition: nonzero = true
Tensor masked_fill(const Tensor& t, const Tensor& mask, float value);
Tensor gt(const Tensor& a, float value);  // 1.0 / 0.0 float mask, no gradient
Tensor eq(const Tensor& a, const Tensor& b);  // 1.0 / 0.0 float mask, no gradient

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, float b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, float b) { return add(a, -b); }
inline Tensor operator*(const Tensor& a, float b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, float b) { return mul(a, 1.0f / b); }
inline Tensor operator*(float a, const Tensor& b) { return mul(b, a); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

// ---- reductions ----
Tensor sum(const Tensor& t);  // all elements, a 0-dim tensor
Tensor sum(const Tensor& t, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& t);
Tensor mean(const Tensor& t, const Shape& dims, bool keepdim = false);
struct MaxResult {
  Tensor values;
  Tensor indices;  // int64
};
MaxResult max(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& t);  // all elements
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);

// ---- linear algebra (oneDNN matmul, or OpenBLAS sgemm: backend/cpu/gemm.h) ----
// (n, k) @ (k, m); (..., n, k) @ (..., k, m) with broadcast batch dims; 1-D operands as in NumPy.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in) · weight (out, in)ᵀ + bias (out): one product that adds the bias (gemm_bias).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- convolution and pooling (NCHW) ----
struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& opt = {});
// How conv2d computes: oneDNN's direct kernels (the default, faster; see backend/cpu/onednn_conv.h)
// or im2col + OpenBLAS sgemm. TESSERA_CONV=im2col|onednn sets the initial choice.
enum class ConvAlgorithm { OneDnn, Im2col };
void set_conv_algorithm(ConvAlgorithm algorithm);
ConvAlgorithm conv_algorithm();
struct Pool2dOptions {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt = {});
// max_pool2d(relu(x)) in one pass, equal to the two ops bit for bit in value and gradient (NaN
// included: relu maps it to 0 first). nn::Sequential runs a ReLU followed by a MaxPool2d through it:
// the ReLU's own pass over the unpooled activations (and its backward's) was 8% of the CNN's step.
Tensor relu_max_pool2d(const Tensor& x, const Pool2dOptions& opt = {});
// count_include_pad=true, as PyTorch's default.
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt = {});

// ---- neural-network functions ----
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);
struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  float label_smoothing = 0.0f;
};
// logits (N, C) float32, targets (N) int64; the mean over non-ignored targets. Fused and stable:
// log-softmax and the loss in one pass, backward (softmax - smoothed one-hot) / count.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opt = {});
Tensor mse_loss(const Tensor& input, const Tensor& target);
// weight (V, D), indices int64 of any shape -> (..., D); backward scatter-adds rows.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Normalises over the trailing dims of `normalized_shape`; weight/bias optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), float eps = 1e-5f);
// x (N, C, ...). In training, uses batch statistics and updates running_mean/var (if defined) in place
// with `momentum` (unbiased variance, as PyTorch); in eval, uses the running statistics.
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight,
                  const Tensor& bias, bool training, float momentum = 0.1f, float eps = 1e-5f);
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen = default_generator());
// q, k, v (..., T, D) -> softmax(q kᵀ / sqrt(D) + causal mask) v.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true);

// ---- joining and indexing ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim);
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& indices);

// ---- fused optimizer updates (in place, no autograd; optim/ and the parameter servers) ----
// One pass over a parameter, its gradient and its state: contiguous float32 tensors of one shape on
// one device; a buffer is undefined where the optimizer keeps none (SGD and LARS without momentum).
void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& step);
void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamStep& step);
// LAMB in two passes, so that the norms can be summed over ZeRO pieces between them: the moments,
// returning ||w||² and ||u||² of the update direction u; then w -= step · u (u recomputed bit for bit).
std::pair<double, double> lamb_moments_(const Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                                        const LambStep& step);
void lamb_apply_(Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const LambStep& step,
                 float scaled_lr);
// LARS with its layer's local lr: v = mu v + local_lr (g + wd w), w -= v (w -= local_lr (g + wd w) without momentum).
void lars_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, float local_lr, float weight_decay,
                  float momentum);
// Σ x² of a float32 tensor, in double.
double squared_norm(const Tensor& t);

}  // namespace tessera
