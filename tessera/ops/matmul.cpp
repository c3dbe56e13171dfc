// matmul and linear over OpenBLAS sgemm, oneDNN's bf16 matmul under Autocast(BFloat16), or fp16
// operands under Autocast(Float16) (autograd/autocast.h). Backward products reuse the forward operands through transposed views,
// which gemm() turns into BLAS transpose flags instead of copies, and run in the precision their
// forward ran in.
#include "tessera/autograd/autocast.h"
#include "tessera/backend/cpu/bf16_gemm.h"
#include "tessera/backend/cpu/fp16_gemm.h"
#include "tessera/backend/cpu/gemm.h"
#include "tessera/ops/detail.h"
#include "tessera/util/thread_pool.h"

namespace tessera {

using autograd::record;

namespace {

// C = alpha · A @ B + beta · C in the precision autocast asks for on this thread.
void product(const cpu::MatrixRef& a, const cpu::MatrixRef& b, float* c, int64_t ldc, float alpha = 1.0f,
             float beta = 0.0f) {
  switch (autocast_dtype()) {
    case DType::BFloat16: cpu::gemm_bf16(a, b, c, ldc, alpha, beta); return;
    case DType::Float16: cpu::gemm_fp16(a, b, c, ldc, alpha, beta); return;
    default: cpu::gemm(a, b, c, ldc, alpha, beta);
  }
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

// (B..., n, k) @ (B..., k, m) with identical, already broadcast batch dims; no autograd.
Tensor batched_matmul(Tensor a, Tensor b, const Shape& batch) {
  a = blas_ready(a);
  b = blas_ready(b);
  int64_t n = a.shape()[a.dim() - 2], m = b.shape()[b.dim() - 1];
  Shape out_shape = batch;
  out_shape.push_back(n);
  out_shape.push_back(m);
  Tensor out = Tensor::empty(out_shape);
  int64_t batch_count = shape_numel(batch);
  Shape bstride_a(a.strides().begin(), a.strides().end() - 2), bstride_b(b.strides().begin(), b.strides().end() - 2);
  for (int64_t i = 0; i < batch_count; ++i) {
    int64_t rem = i, off_a = 0, off_b = 0;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      int64_t idx = rem % batch[d];
      rem /= batch[d];
      off_a += idx * bstride_a[d];
      off_b += idx * bstride_b[d];
    }
    product(matrix_at(a, off_a), matrix_at(b, off_b), out.data<float>() + i * n * m, m);
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_float(a, "matmul", "a");
  detail::check_float(b, "matmul", "b");
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
  Tensor out;
  {
    NoGradGuard no_grad;
    out = batched_matmul(expand(a, full_a), expand(b, full_b), batch);
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

// x (N, in) · w (out, in)ᵀ + bias, one node.
Tensor linear_2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) {
  Tensor x = blas_ready(x_in), w = blas_ready(w_in);
  int64_t N = x.shape()[0], out_features = w.shape()[0];
  Tensor out = Tensor::empty({N, out_features});
  float beta = 0.0f;
  if (bias.defined()) {
    Tensor bc = detail::as_contiguous(bias);
    const float* bp = bc.data<float>();
    float* o = out.data<float>();
    for (int64_t i = 0; i < N; ++i) std::copy(bp, bp + out_features, o + i * out_features);
    beta = 1.0f;
  }
  product(matrix_at(x, 0), transposed(matrix_at(w, 0)), out.data<float>(), out_features, 1.0f, beta);
  bool gx = x_in.requires_grad(), gw = w_in.requires_grad(), gbias = bias.defined() && bias.requires_grad();
  const DType precision = autocast_dtype();
  return record(out, "LinearBackward", {x_in, w_in, bias}, [x, w, gx, gw, gbias, precision](const Tensor& g_in) {
    Autocast as_forward(precision);
    Tensor g = blas_ready(g_in);
    Tensor grad_x, grad_w, grad_b;
    int64_t N = x.shape()[0], in_features = x.shape()[1], out_features = w.shape()[0];
    if (gx) {
      grad_x = Tensor::empty({N, in_features});
      product(matrix_at(g, 0), matrix_at(w, 0), grad_x.data<float>(), in_features);
    }
    if (gw) {
      grad_w = Tensor::empty({out_features, in_features});
      product(transposed(matrix_at(g, 0)), matrix_at(x, 0), grad_w.data<float>(), in_features);
    }
    if (gbias) grad_b = sum(g, {0});
    return std::vector<Tensor>{grad_x, grad_w, grad_b};
  });
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_float(x, "linear", "x");
  detail::check_float(weight, "linear", "weight");
  TESSERA_CHECK(weight.dim() == 2, "[linear] weight must be 2-D (out, in), got ", shape_str(weight.shape()));
  TESSERA_CHECK(x.dim() >= 1 && x.shape().back() == weight.shape()[1], "[linear] input ", shape_str(x.shape()),
                " does not match weight ", shape_str(weight.shape()), " (expected last dim ", weight.shape()[1], ")");
  if (bias.defined()) {
    detail::check_float(bias, "linear", "bias");
    TESSERA_CHECK(bias.dim() == 1 && bias.shape()[0] == weight.shape()[0], "[linear] bias ",
                  shape_str(bias.shape()), " does not match weight ", shape_str(weight.shape()));
  }
  if (x.dim() == 2) return linear_2d(x, weight, bias);
  Shape out_shape = x.shape();
  out_shape.back() = weight.shape()[0];
  return reshape(linear_2d(reshape(x, {-1, x.shape().back()}), weight, bias), out_shape);
}

}  // namespace tessera
