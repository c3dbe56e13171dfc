// matmul and linear over cpu::gemm (oneDNN's float32 matmul, or OpenBLAS sgemm: gemm.h), oneDNN's
// bf16 matmul under Autocast(BFloat16), or fp16 operands under Autocast(Float16)
// (autograd/autocast.h). Backward products reuse the forward operands through transposed views,
// which gemm() passes as column-major operands instead of copies, and run in the precision their
// forward ran in (bf16 keeps the forward's rounded copies). On a device, both are its kernel table's
// matmul (ops/kernels.h; cuBLASLt on CUDA), the backward too.
#include "tessera/autograd/autocast.h"
#include "tessera/autograd/node.h"
#include "tessera/autograd/weight_grad_deferral.h"
#include "tessera/backend/cpu/bf16_gemm.h"
#include "tessera/backend/cpu/fp16_gemm.h"
#include "tessera/backend/cpu/gemm.h"
#include "tessera/ops/detail.h"
#include "tessera/ops/kernels.h"
#include "tessera/util/thread_pool.h"

#include <map>
#include <tuple>
#include <vector>

namespace tessera {

using autograd::record;

namespace {

// C = alpha · A @ B + beta · C in float32, or on fp16-rounded operands under Autocast(Float16).
// (bf16 has its own paths below, matmul_bf16 and linear_2d_bf16, which round each operand once.)
void product(const cpu::MatrixRef& a, const cpu::MatrixRef& b, float* c, int64_t ldc, float alpha = 1.0f,
             float beta = 0.0f) {
  if (autocast_dtype() == DType::Float16)
    cpu::gemm_fp16(a, b, c, ldc, alpha, beta);
  else
    cpu::gemm(a, b, c, ldc, alpha, beta);
}

// The (rows, cols) matrix at `base_offset` of a tensor whose last two dims are the matrix dims.
cpu::MatrixRef matrix_at(const Tensor& t, int64_t element_offset) {
  int64_t nd = t.dim();
  return {t.data<float>() + element_offset, t.shape()[nd - 2], t.shape()[nd - 1], t.strides()[nd - 2],
          t.strides()[nd - 1]};
}

// The transpose of the matrix view, as a view (no autograd node is created).
cpu::MatrixRef transposed(const cpu::MatrixRef& m) { return {m.data, m.cols, m.rows, m.col_stride, m.row_stride}; }

Tensor blas_ready(const Tensor& t) {
  cpu::MatrixRef m = matrix_at(t, 0);
  return cpu::blas_compatible(m) ? t : contiguous(t);
}

// The element offset of batch item i's matrix in a tensor whose leading dims are `batch`.
int64_t batch_offset(const Tensor& t, const Shape& batch, int64_t i) {
  int64_t offset = 0;
  for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
    offset += (i % batch[d]) * t.strides()[d];
    i /= batch[d];
  }
  return offset;
}

Tensor batched_output(const Shape& batch, int64_t n, int64_t m) {
  Shape out_shape = batch;
  out_shape.push_back(n);
  out_shape.push_back(m);
  return Tensor::empty(out_shape);
}

// (B..., n, k) @ (B..., k, m) with identical, already broadcast batch dims; no autograd.
Tensor batched_matmul(Tensor a, Tensor b, const Shape& batch) {
  a = blas_ready(a);
  b = blas_ready(b);
  int64_t n = a.shape()[a.dim() - 2], m = b.shape()[b.dim() - 1];
  Tensor out = batched_output(batch, n, m);
  const int64_t count = shape_numel(batch);
  // Items at one step from each other (attention's heads and batch, contiguous or transposed views of
  // it): one batched product, which oneDNN runs far faster than a call per item (gemm.h).
  auto uniform_step = [&](const Tensor& t) -> int64_t {
    const int64_t step = count > 1 ? batch_offset(t, batch, 1) : 0;
    for (int64_t i = 2; i < count; ++i)
      if (batch_offset(t, batch, i) != i * step) return -1;
    return step;
  };
  const int64_t a_step = uniform_step(a), b_step = uniform_step(b);
  if (count > 1 && a_step > 0 && b_step > 0 && autocast_dtype() != DType::Float16) {
    cpu::gemm_batched(matrix_at(a, 0), a_step, matrix_at(b, 0), b_step, out.data<float>(), m, n * m, count);
    return out;
  }
  for (int64_t i = 0; i < count; ++i)
    product(matrix_at(a, batch_offset(a, batch, i)), matrix_at(b, batch_offset(b, batch, i)),
            out.data<float>() + i * n * m, m);
  return out;
}

// Each batch item's matrix rounded to bf16 once (an item broadcast to several is converted once).
std::vector<cpu::Bf16Matrix> bf16_items(const Tensor& t, const Shape& batch) {
  std::vector<cpu::Bf16Matrix> items;
  std::map<int64_t, size_t> converted;  // offset -> item
  for (int64_t i = 0; i < shape_numel(batch); ++i) {
    const int64_t offset = batch_offset(t, batch, i);
    auto it = converted.find(offset);
    if (it != converted.end()) {
      items.push_back(items[it->second]);
    } else {
      converted.emplace(offset, items.size());
      items.emplace_back(matrix_at(t, offset));
    }
  }
  return items;
}

// matmul under bf16 autocast (attention's two products): as linear_2d_bf16, both operands are
// rounded once and the backward keeps those copies, rounding the output gradient once for its two
// products.
Tensor matmul_bf16(const Tensor& a, const Tensor& b, const Shape& batch, const Shape& full_a, const Shape& full_b) {
  std::vector<cpu::Bf16Matrix> ab, bb;
  {
    NoGradGuard no_grad;
    ab = bf16_items(blas_ready(expand(a, full_a)), batch);
    bb = bf16_items(blas_ready(expand(b, full_b)), batch);
  }
  const int64_t n = full_a[full_a.size() - 2], k = full_a.back(), m = full_b.back(), count = shape_numel(batch);
  Tensor out = batched_output(batch, n, m);
  for (int64_t i = 0; i < count; ++i) cpu::gemm_bf16(ab[i], bb[i], out.data<float>() + i * n * m, m);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  const Shape shape_a = a.shape(), shape_b = b.shape();
  return record(out, "MatmulBackward", {a, b},
                [ab, bb, batch, full_a, full_b, shape_a, shape_b, n, k, m, count, ga, gb](const Tensor& g_in) {
                  const Tensor g = contiguous(g_in);  // item i at offset i·n·m
                  Tensor grad_a = ga ? Tensor::empty(full_a) : Tensor(), grad_b = gb ? Tensor::empty(full_b) : Tensor();
                  for (int64_t i = 0; i < count; ++i) {
                    const cpu::Bf16Matrix gi(matrix_at(g, i * n * m));
                    if (ga) cpu::gemm_bf16(gi, bb[i].transposed(), grad_a.data<float>() + i * n * k, k);
                    if (gb) cpu::gemm_bf16(ab[i].transposed(), gi, grad_b.data<float>() + i * k * m, m);
                  }
                  return std::vector<Tensor>{ga ? sum_to(grad_a, shape_a) : Tensor(),
                                             gb ? sum_to(grad_b, shape_b) : Tensor()};
                });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_float(a, "matmul", "a");
  detail::check_float(b, "matmul", "b");
  detail::check_same_device(a, b, "matmul");
  TESSERA_CHECK(a.dim() >= 1 && b.dim() >= 1, "[matmul] both operands need at least one dim, got ",
                shape_str(a.shape()), " and ", shape_str(b.shape()));
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);
  int64_t k = a.shape()[a.dim() - 1];
  TESSERA_CHECK(k == b.shape()[b.dim() - 2], "[matmul] inner dimensions differ: ", shape_str(a.shape()), " @ ",
                shape_str(b.shape()));
  Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape full_a = batch, full_b = batch;
  full_a.insert(full_a.end(), a.shape().end() - 2, a.shape().end());
  full_b.insert(full_b.end(), b.shape().end() - 2, b.shape().end());
  const bool on_cpu = a.device().is_cpu();
  if (on_cpu && autocast_dtype() == DType::BFloat16) return matmul_bf16(a, b, batch, full_a, full_b);
  Tensor out;
  {
    NoGradGuard no_grad;
    // A device's product is its kernel table's (cuBLASLt on CUDA), in autocast's precision.
    out = on_cpu ? batched_matmul(expand(a, full_a), expand(b, full_b), batch)
                 : kernels_for(a).matmul(expand(a, full_a), expand(b, full_b), Tensor(), autocast_dtype());
  }
  bool ga = a.requires_grad(), gb = b.requires_grad();
  const DType precision = autocast_dtype();
  return record(out, "MatmulBackward", {a, b}, [a, b, ga, gb, precision](const Tensor& g) {
    Autocast as_forward(precision);
    Tensor grad_a, grad_b;
    if (ga) grad_a = sum_to(matmul(g, transpose(b, -1, -2)), a.shape());
    if (gb) grad_b = sum_to(matmul(transpose(a, -1, -2), g), b.shape());
    return std::vector<Tensor>{grad_a, grad_b};
  });
}

namespace {

// The (N, out) output of a linear layer: the bias in every row (the product then adds to it: beta 1),
// or uninitialised (beta 0).
std::pair<Tensor, float> linear_output(int64_t N, int64_t out_features, const Tensor& bias) {
  Tensor out = Tensor::empty({N, out_features});
  if (!bias.defined()) return {out, 0.0f};
  Tensor bc = detail::as_contiguous(bias);
  const float* bp = bc.data<float>();
  float* o = out.data<float>();
  parallel_for(0, N, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out_features)), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) std::copy(bp, bp + out_features, o + i * out_features);
  });
  return {out, 1.0f};
}

// Under a zero-bubble schedule's deferral (autograd/weight_grad_deferral.h), queues linear's weight
// and bias gradients to be added to their leaves later, and returns true; false when no deferral is
// installed or a wanted gradient has no leaf to go to, and the backward computes them now. The
// leaves' accumulators are looked up here, at backward time, so ordinary steps pay nothing.
template <typename WeightGrads>
bool defer_weight_grads(const Tensor& w, const Tensor& bias, bool gw, bool gbias, const WeightGrads& weight_grads) {
  autograd::WeightGradQueue* queue = autograd::deferred_weight_grads();
  if (queue == nullptr || (!gw && !gbias)) return false;
  std::shared_ptr<autograd::Node> to_weight = gw ? autograd::deferrable_sink(w) : nullptr;
  std::shared_ptr<autograd::Node> to_bias = gbias ? autograd::deferrable_sink(bias) : nullptr;
  if ((gw && !to_weight) || (gbias && !to_bias)) return false;
  queue->push([to_weight, to_bias, weight_grads] {
    auto [grad_w, grad_b] = weight_grads();
    if (grad_w.defined()) to_weight->apply(grad_w);
    if (grad_b.defined()) to_bias->apply(grad_b);
  });
  return true;
}

// linear under bf16 autocast: x and w are rounded to bf16 once, and the backward keeps those copies
// (not the float32 tensors) and rounds the output gradient once for both of its products: 3
// conversions where rounding per product took 6 (PyTorch's autocast likewise saves the bf16 casts).
Tensor linear_2d_bf16(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) {
  const Tensor x = blas_ready(x_in), w = blas_ready(w_in);
  const int64_t N = x.shape()[0], in_features = x.shape()[1], out_features = w.shape()[0];
  Tensor out = Tensor::empty({N, out_features});
  const Tensor bias_values = bias.defined() ? detail::as_contiguous(bias) : Tensor();
  const cpu::Bf16Matrix xb(matrix_at(x, 0)), wb(matrix_at(w, 0));
  cpu::gemm_bf16(xb, wb.transposed(), out.data<float>(), out_features, 1.0f, 0.0f,
                 bias_values.defined() ? bias_values.data<float>() : nullptr);
  const bool gx = x_in.requires_grad(), gw = w_in.requires_grad(), gbias = bias.defined() && bias.requires_grad();
  return record(out, "LinearBackward", {x_in, w_in, bias},
                [xb, wb, w_in, bias, N, in_features, out_features, gx, gw, gbias](const Tensor& g_in) {
                  Tensor g = blas_ready(g_in);
                  Tensor grad_x;
                  const cpu::Bf16Matrix gb(matrix_at(g, 0));
                  if (gx) {
                    grad_x = Tensor::empty({N, in_features});
                    cpu::gemm_bf16(gb, wb, grad_x.data<float>(), in_features);
                  }
                  auto weight_grads = [gb, xb, g, w_in, out_features, in_features, gw, gbias] {
                    Tensor grad_w, grad_b;
                    if (gw) {
                      grad_w = autograd::gradient_destination(w_in, {out_features, in_features});
                      cpu::gemm_bf16(gb.transposed(), xb, grad_w.data<float>(), in_features);
                    }
                    if (gbias) grad_b = sum(g, {0});
                    return std::pair{grad_w, grad_b};
                  };
                  if (defer_weight_grads(w_in, bias, gw, gbias, weight_grads))
                    return std::vector<Tensor>{grad_x, Tensor(), Tensor()};
                  auto [grad_w, grad_b] = weight_grads();
                  return std::vector<Tensor>{grad_x, grad_w, grad_b};
                });
}

// linear on a device: x (N, in) · wᵀ + bias as one product of the device's table (the bias in its
// epilogue on CUDA), and the backward's three as the table's products too, in the forward's
// precision. The weight and bias gradients honour a zero-bubble deferral, as on the CPU.
Tensor linear_2d_on_device(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const DType precision = autocast_dtype();
  const Kernels& kernels = kernels_for(x);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = kernels.matmul(x, transpose(w, 0, 1), bias.defined() ? bias : Tensor(), precision);
  }
  const bool gx = x.requires_grad(), gw = w.requires_grad(), gbias = bias.defined() && bias.requires_grad();
  return record(out, "LinearBackward", {x, w, bias}, [&kernels, x, w, bias, gx, gw, gbias, precision](const Tensor& g) {
    Tensor grad_x;
    if (gx) grad_x = kernels.matmul(g, w, Tensor(), precision);
    auto weight_grads = [&kernels, x, g, gw, gbias, precision] {
      Tensor grad_w, grad_b;
      if (gw) grad_w = kernels.matmul(transpose(g, 0, 1), x, Tensor(), precision);
      if (gbias) grad_b = sum(g, {0});
      return std::pair{grad_w, grad_b};
    };
    if (defer_weight_grads(w, bias, gw, gbias, weight_grads)) return std::vector<Tensor>{grad_x, Tensor(), Tensor()};
    auto [grad_w, grad_b] = weight_grads();
    return std::vector<Tensor>{grad_x, grad_w, grad_b};
  });
}

// x (N, in) · w (out, in)ᵀ + bias, one node.
Tensor linear_2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) {
  if (!x_in.device().is_cpu()) return linear_2d_on_device(x_in, w_in, bias);
  const DType precision = autocast_dtype();
  if (precision == DType::BFloat16) return linear_2d_bf16(x_in, w_in, bias);
  Tensor x = blas_ready(x_in), w = blas_ready(w_in);
  int64_t N = x.shape()[0], out_features = w.shape()[0];
  Tensor out;
  if (bias.defined() && precision != DType::Float16) {
    out = Tensor::empty({N, out_features});
    const Tensor bias_values = detail::as_contiguous(bias);
    cpu::gemm_bias(matrix_at(x, 0), transposed(matrix_at(w, 0)), bias_values.data<float>(), out.data<float>(),
                   out_features);
  } else {
    float beta = 0.0f;
    std::tie(out, beta) = linear_output(N, out_features, bias);
    product(matrix_at(x, 0), transposed(matrix_at(w, 0)), out.data<float>(), out_features, 1.0f, beta);
  }
  bool gx = x_in.requires_grad(), gw = w_in.requires_grad(), gbias = bias.defined() && bias.requires_grad();
  return record(out, "LinearBackward", {x_in, w_in, bias},
                [x, w, w_in, bias, gx, gw, gbias, precision](const Tensor& g_in) {
    Autocast as_forward(precision);
    Tensor g = blas_ready(g_in);
    Tensor grad_x;
    int64_t N = x.shape()[0], in_features = x.shape()[1], out_features = w.shape()[0];
    if (gx) {
      grad_x = Tensor::empty({N, in_features});
      product(matrix_at(g, 0), matrix_at(w, 0), grad_x.data<float>(), in_features);
    }
    auto weight_grads = [x, g, w_in, out_features, in_features, gw, gbias, precision] {
      Autocast as_forward(precision);
      Tensor grad_w, grad_b;
      if (gw) {
        // Straight into DDP's bucket slot (or the parameter server's segment) when AccumulateGrad
        // would copy it there: the MLP under DDP saves a copy of 2.1 MB a step.
        grad_w = autograd::gradient_destination(w_in, {out_features, in_features});
        product(transposed(matrix_at(g, 0)), matrix_at(x, 0), grad_w.data<float>(), in_features);
      }
      if (gbias) grad_b = sum(g, {0});
      return std::pair{grad_w, grad_b};
    };
    if (defer_weight_grads(w_in, bias, gw, gbias, weight_grads)) return std::vector<Tensor>{grad_x, Tensor(), Tensor()};
    auto [grad_w, grad_b] = weight_grads();
    return std::vector<Tensor>{grad_x, grad_w, grad_b};
  });
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_float(x, "linear", "x");
  detail::check_float(weight, "linear", "weight");
  detail::check_same_device(x, weight, "linear");
  TESSERA_CHECK(weight.dim() == 2, "[linear] weight must be 2-D (out, in), got ", shape_str(weight.shape()));
  TESSERA_CHECK(x.dim() >= 1 && x.shape().back() == weight.shape()[1], "[linear] input ", shape_str(x.shape()),
                " does not match weight ", shape_str(weight.shape()), " (expected last dim ", weight.shape()[1], ")");
  if (bias.defined()) {
    detail::check_float(bias, "linear", "bias");
    detail::check_same_device(x, bias, "linear");
    TESSERA_CHECK(bias.dim() == 1 && bias.shape()[0] == weight.shape()[0], "[linear] bias ",
                  shape_str(bias.shape()), " does not match weight ", shape_str(weight.shape()));
  }
  if (x.dim() == 2) return linear_2d(x, weight, bias);
  Shape out_shape = x.shape();
  out_shape.back() = weight.shape()[0];
  return reshape(linear_2d(reshape(x, {-1, x.shape().back()}), weight, bias), out_shape);
}

}  // namespace tessera
