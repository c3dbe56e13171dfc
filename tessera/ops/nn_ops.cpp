// Neural-network functions: softmax family, losses, embedding, normalisation, dropout, attention.
// Row kernels work on the last dim of a contiguous (M, D) view; other dims are moved there by a
// transpose, which autograd differentiates like any other view.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/backend/cpu/vector_math.h"
#include "tessera/ops/detail.h"
#include "tessera/util/thread_pool.h"

namespace tessera {

using autograd::record;

namespace {

int64_t row_grain(int64_t D) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)); }

// A row kernel over a contiguous (M, D) input: the output, row by row on the pool; body(m, x row,
// y row) fills row m. Bodies capture what they read by value, so the row loops see plain locals
// (with references, two 2-thread GPT runs were 13% slower; by value, level with the loops written
// out).
template <typename Body>
Tensor row_forward(const Tensor& t, int64_t D, int64_t M, const Body& body) {
  Tensor out = Tensor::empty(t.shape());
  const float* x = t.data<float>();
  float* y = out.data<float>();
  parallel_for(0, M, row_grain(D), [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) body(m, x + m * D, y + m * D);
  });
  return out;
}

// The backward of a row kernel over (M, D): the gradient, row by row on the pool, from the upstream
// gradient and the saved output; body(m, g row, y row, gradient row) fills row m.
template <typename Body>
Tensor row_backward(const Tensor& saved, const Tensor& g_in, int64_t D, int64_t M, const Body& body) {
  Tensor g = detail::as_contiguous(g_in);
  Tensor grad = Tensor::empty(saved.shape());
  const float* gp = g.data<float>();
  const float* yp = saved.data<float>();
  float* dp = grad.data<float>();
  parallel_for(0, M, row_grain(D), [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) body(m, gp + m * D, yp + m * D, dp + m * D);
  });
  return grad;
}

// Softmax or log-softmax over the last dim.
Tensor softmax_last(const Tensor& t_in, bool log_space) {
  Tensor t = detail::as_contiguous(t_in);
  const int64_t D = t.dim() == 0 ? 1 : t.shape().back(), M = D == 0 ? 0 : t.numel() / D;
  Tensor out = row_forward(t, D, M, [D, log_space](int64_t, const float* xr, float* yr) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < D; ++i) mx = std::max(mx, xr[i]);
    if (!std::isfinite(mx) || cpu::any_nan(xr, D)) {  // NaN, ±inf or an all-masked row: libm's rules
      float s = 0.0f;
      for (int64_t i = 0; i < D; ++i) s += std::exp(xr[i] - mx);
      const float lse = mx + std::log(s), inv = 1.0f / s;
      for (int64_t i = 0; i < D; ++i) yr[i] = log_space ? xr[i] - lse : std::exp(xr[i] - mx) * inv;
      return;
    }
    // Every xr[i] - mx is now <= 0 or -inf (a masked score). Each exponential is computed once,
    // vectorised, into the output row, which is then summed and scaled: libm's expf, called twice
    // per element, was 8% of the GPT's bf16 step.
    for (int64_t i = 0; i < D; ++i) yr[i] = cpu::exp_nonpositive(xr[i] - mx);
    const float s = cpu::sum_in_lanes(yr, D);
    if (log_space) {
      const float lse = mx + std::log(s);
      for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] - lse;
    } else {
      const float inv = 1.0f / s;
      for (int64_t i = 0; i < D; ++i) yr[i] *= inv;
    }
  });
  Tensor saved = out.detach();
  return record(out, log_space ? "LogSoftmaxBackward" : "SoftmaxBackward", {t_in}, [saved, log_space, D, M](const Tensor& g_in) {
    return std::vector<Tensor>{row_backward(saved, g_in, D, M, [D, log_space](int64_t, const float* gr, const float* yr, float* dr) {
      if (log_space) {
        const float s = cpu::sum_in_lanes(gr, D);
        for (int64_t i = 0; i < D; ++i) dr[i] = gr[i] - std::exp(yr[i]) * s;
      } else {
        for (int64_t i = 0; i < D; ++i) dr[i] = gr[i] * yr[i];  // the products, then their sum
        const float s = cpu::sum_in_lanes(dr, D);
        for (int64_t i = 0; i < D; ++i) dr[i] = yr[i] * (gr[i] - s);
      }
    })};
  }, autograd::Saves::Nothing);
}

// Attention's weights from its raw scores (..., Tq, Tk): softmax(scale · scores) over the last dim,
// where under `causal` query i sees keys j <= i + (Tk - Tq) only. One pass each way instead of four
// (a scale, a mask built for the call and filled in, a softmax; and the backward of each), and the
// masked keys' exponentials are never computed; the GPT's steps spent 1-2% on those passes. The
// arithmetic is the four ops' own, in their order: the weights and gradients are the same bits.
Tensor attention_weights(const Tensor& scores_in, float scale, bool causal) {
  Tensor scores = detail::as_contiguous(scores_in);
  const int64_t Tq = scores.shape()[scores.dim() - 2], Tk = scores.shape().back();
  const int64_t M = Tk == 0 ? 0 : scores.numel() / Tk;
  // How many keys row m sees: all, or under `causal` i + (Tk - Tq) + 1 of them (none is a row of
  // NaN, as softmax gives a row that is all -inf).
  auto visible = [Tq, Tk, causal](int64_t m) {
    return causal ? std::clamp<int64_t>(m % Tq + (Tk - Tq) + 1, 0, Tk) : Tk;
  };
  Tensor out = row_forward(scores, Tk, M, [scale, visible, Tk](int64_t m, const float* xr, float* yr) {
    const int64_t n = visible(m);
    // The scaled scores go through the output row, as the scale's own output did: computed in
    // the exponential's argument, scale · x - max could be contracted into one FMA and round
    // differently.
    for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * scale;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, yr[j]);
    if (!std::isfinite(mx) || cpu::any_nan(yr, n)) {  // NaN, ±inf or nothing visible: libm's rules, as softmax's
      for (int64_t j = n; j < Tk; ++j) yr[j] = -std::numeric_limits<float>::infinity();
      float s = 0.0f;
      for (int64_t j = 0; j < Tk; ++j) s += std::exp(yr[j] - mx);
      const float inv = 1.0f / s;
      for (int64_t j = 0; j < Tk; ++j) yr[j] = std::exp(yr[j] - mx) * inv;
      return;
    }
    for (int64_t j = 0; j < n; ++j) yr[j] = cpu::exp_nonpositive(yr[j] - mx);
    for (int64_t j = n; j < Tk; ++j) yr[j] = 0.0f;
    const float inv = 1.0f / cpu::sum_in_lanes(yr, Tk);
    for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
  });
  Tensor saved = out.detach();
  return record(out, "AttentionWeightsBackward", {scores_in}, [saved, scale, visible, Tk, M](const Tensor& g_in) {
    return std::vector<Tensor>{row_backward(saved, g_in, Tk, M, [scale, visible, Tk](int64_t m, const float* gr, const float* yr, float* dr) {
      const int64_t n = visible(m);
      for (int64_t j = 0; j < Tk; ++j) dr[j] = gr[j] * yr[j];  // softmax's backward
      const float s = cpu::sum_in_lanes(dr, Tk);
      for (int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - s) * scale;  // then the scale's
      for (int64_t j = n; j < Tk; ++j) dr[j] = 0.0f;                          // masked: the fill's
    })};
  }, autograd::Saves::Nothing);
}

Tensor softmax_any(const Tensor& t, int64_t dim, bool log_space, const char* op) {
  detail::check_float(t, op, "input");
  if (t.dim() == 0) return softmax_last(t, log_space);
  int64_t d = normalize_dim(dim, t.dim(), op);
  if (d == t.dim() - 1) return softmax_last(t, log_space);
  return transpose(softmax_last(transpose(t, d, -1), log_space), d, -1);
}

}  // namespace

Tensor softmax(const Tensor& t, int64_t dim) { return softmax_any(t, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& t, int64_t dim) { return softmax_any(t, dim, true, "log_softmax"); }

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets_in, const CrossEntropyOptions& opt) {
  detail::check_float(logits_in, "cross_entropy", "logits");
  detail::check_defined(targets_in, "cross_entropy", "targets");
  TESSERA_CHECK(logits_in.dim() == 2, "[cross_entropy] logits must be (N, C), got ", shape_str(logits_in.shape()));
  TESSERA_CHECK(targets_in.dtype() == DType::Int64, "[cross_entropy] targets must be int64 class indices, got ",
                dtype_name(targets_in.dtype()));
  TESSERA_CHECK(targets_in.dim() == 1 && targets_in.shape()[0] == logits_in.shape()[0], "[cross_entropy] targets ",
                shape_str(targets_in.shape()), " do not match logits ", shape_str(logits_in.shape()));
  TESSERA_CHECK(opt.label_smoothing >= 0.0f && opt.label_smoothing <= 1.0f,
                "[cross_entropy] label_smoothing must be in [0, 1], got ", opt.label_smoothing);
  Tensor logits = detail::as_contiguous(logits_in), targets = detail::as_contiguous(targets_in);
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  const float* x = logits.data<float>();
  const int64_t* t = targets.data<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] == opt.ignore_index) continue;
    TESSERA_CHECK_INDEX(t[i] >= 0 && t[i] < C, "[cross_entropy] target ", t[i], " at position ", i,
                        " is out of range for ", C, " classes");
    ++count;
  }
  // Row log-sum-exp, kept for the backward.
  auto lse = std::make_shared<std::vector<float>>(N);
  const float eps = opt.label_smoothing;
  double total = 0.0;
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] == opt.ignore_index) continue;
    const float* r = x + i * C;
    float mx = *std::max_element(r, r + C);
    float s = 0.0f, row_sum = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      s += std::exp(r[c] - mx);
      row_sum += r[c];
    }
    float l = mx + std::log(s);
    (*lse)[i] = l;
    total += (1.0f - eps) * (l - r[t[i]]) + eps * (l - row_sum / C);
  }
  Tensor out = scalar_tensor(count ? static_cast<float>(total / count) : std::numeric_limits<float>::quiet_NaN());
  const int64_t ignore = opt.ignore_index;
  return record(out, "CrossEntropyBackward", {logits_in}, [logits, targets, lse, count, eps, ignore](const Tensor& g) {
    const int64_t N = logits.shape()[0], C = logits.shape()[1];
    Tensor grad = zeros({N, C});
    if (count == 0) return std::vector<Tensor>{grad};
    const float scale = g.item<float>() / static_cast<float>(count);
    const float* x = logits.data<float>();
    const int64_t* t = targets.data<int64_t>();
    float* d = grad.data<float>();
    for (int64_t i = 0; i < N; ++i) {
      if (t[i] == ignore) continue;
      const float* r = x + i * C;
      float* dr = d + i * C;
      float l = (*lse)[i];
      for (int64_t c = 0; c < C; ++c) dr[c] = (std::exp(r[c] - l) - eps / C) * scale;
      dr[t[i]] -= (1.0f - eps) * scale;
    }
    return std::vector<Tensor>{grad};
  });
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  detail::check_float(input, "mse_loss", "input");
  detail::check_float(target, "mse_loss", "target");
  TESSERA_CHECK(input.shape() == target.shape(), "[mse_loss] input ", shape_str(input.shape()),
                " and target ", shape_str(target.shape()), " differ in shape");
  Tensor d = sub(input, target);
  return mean(mul(d, d));
}

Tensor embedding(const Tensor& weight_in, const Tensor& indices_in) {
  detail::check_float(weight_in, "embedding", "weight");
  detail::check_defined(indices_in, "embedding", "indices");
  TESSERA_CHECK(weight_in.dim() == 2, "[embedding] weight must be (num_embeddings, dim), got ",
                shape_str(weight_in.shape()));
  TESSERA_CHECK(indices_in.dtype() == DType::Int64, "[embedding] indices must be int64, got ",
                dtype_name(indices_in.dtype()));
  Tensor weight = detail::as_contiguous(weight_in), indices = detail::as_contiguous(indices_in);
  const int64_t V = weight.shape()[0], D = weight.shape()[1], n = indices.numel();
  const int64_t* ix = indices.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TESSERA_CHECK_INDEX(ix[i] >= 0 && ix[i] < V, "[embedding] index ", ix[i], " at position ", i,
                        " is out of range for ", V, " embeddings");
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape);
  const float* w = weight.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i) std::copy(w + ix[i] * D, w + (ix[i] + 1) * D, o + i * D);
  return record(out, "EmbeddingBackward", {weight_in}, [indices, V, D](const Tensor& g_in) {
    Tensor g = detail::as_contiguous(g_in);
    Tensor grad = zeros({V, D});
    const int64_t* ix = indices.data<int64_t>();
    const float* gp = g.data<float>();
    float* dp = grad.data<float>();
    for (int64_t i = 0; i < indices.numel(); ++i)
      for (int64_t j = 0; j < D; ++j) dp[ix[i] * D + j] += gp[i * D + j];
    return std::vector<Tensor>{grad};
  }, autograd::Saves::Nothing);
}

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  float eps) {
  detail::check_float(x_in, "layer_norm", "input");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  TESSERA_CHECK(k >= 1 && x_in.dim() >= k &&
                    Shape(x_in.shape().end() - k, x_in.shape().end()) == normalized_shape,
                "[layer_norm] normalized_shape ", shape_str(normalized_shape), " does not match the trailing dims of ",
                shape_str(x_in.shape()));
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) {
      detail::check_float(*p, "layer_norm", "weight/bias");
      TESSERA_CHECK(p->shape() == normalized_shape, "[layer_norm] weight/bias shape ", shape_str(p->shape()),
                    " must equal normalized_shape ", shape_str(normalized_shape));
    }
  Tensor x = detail::as_contiguous(x_in);
  Tensor w = weight.defined() ? detail::as_contiguous(weight) : Tensor();
  Tensor b = bias.defined() ? detail::as_contiguous(bias) : Tensor();
  const int64_t D = shape_numel(normalized_shape), M = D == 0 ? 0 : x.numel() / D;
  Tensor out = Tensor::empty(x.shape());
  auto mean_rstd = std::make_shared<std::vector<float>>(2 * M);
  const float* xp = x.data<float>();
  const float* wp = w.defined() ? w.data<float>() : nullptr;
  const float* bp = b.defined() ? b.data<float>() : nullptr;
  float* op = out.data<float>();
  // Row statistics from lane sums (cpu::sum_in_lanes), which vectorise where one running sum does not.
  parallel_for(0, M, row_grain(D), [&](int64_t s, int64_t e) {
    for (int64_t m = s; m < e; ++m) {
      const float* r = xp + m * D;
      float* o = op + m * D;
      const float mu = cpu::sum_in_lanes(r, D) / static_cast<float>(D);
      for (int64_t i = 0; i < D; ++i) o[i] = r[i] - mu;
      const float var = cpu::dot_in_lanes(o, o, D) / static_cast<float>(D);
      const float rstd = 1.0f / std::sqrt(var + eps);
      (*mean_rstd)[2 * m] = mu;
      (*mean_rstd)[2 * m + 1] = rstd;
      for (int64_t i = 0; i < D; ++i) o[i] = o[i] * rstd * (wp ? wp[i] : 1.0f) + (bp ? bp[i] : 0.0f);
    }
  });
  bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  return record(out, "LayerNormBackward", {x_in, weight, bias}, [x, w, mean_rstd, M, D, gw, gb](const Tensor& g_in) {
    Tensor g = detail::as_contiguous(g_in);
    Tensor gx = Tensor::empty(x.shape());
    Tensor gwt = zeros({D}), gbt = zeros({D});
    const float* xp = x.data<float>();
    const float* gp = g.data<float>();
    const float* wp = w.defined() ? w.data<float>() : nullptr;
    float* dx = gx.data<float>();
    float* dw = gwt.data<float>();
    float* db = gbt.data<float>();
    const auto* stats = mean_rstd->data();
    // The input gradient row by row, rows across the threads; x̂ and g·w go through dx's row first.
    parallel_for(0, M, row_grain(D), [&](int64_t s, int64_t e) {
      std::vector<float> gh(static_cast<size_t>(D));
      for (int64_t m = s; m < e; ++m) {
        const float mu = stats[2 * m], rstd = stats[2 * m + 1];
        const float* r = xp + m * D;
        const float* gr = gp + m * D;
        float* xhat = dx + m * D;
        for (int64_t i = 0; i < D; ++i) {
          xhat[i] = (r[i] - mu) * rstd;
          gh[static_cast<size_t>(i)] = gr[i] * (wp ? wp[i] : 1.0f);
        }
        const float mean_g = cpu::sum_in_lanes(gh.data(), D) / static_cast<float>(D);
        const float mean_gx = cpu::dot_in_lanes(gh.data(), xhat, D) / static_cast<float>(D);
        for (int64_t i = 0; i < D; ++i) xhat[i] = rstd * (gh[static_cast<size_t>(i)] - mean_g - xhat[i] * mean_gx);
      }
    });
    // Weight and bias gradients: sums over the rows, columns across the threads, each column summed
    // in row order whatever the thread count (the same bits on 1 thread or 8).
    if (gw || gb)
      parallel_for(0, D, std::max<int64_t>(16, D / 64), [&](int64_t c0, int64_t c1) {
        for (int64_t m = 0; m < M; ++m) {
          const float mu = stats[2 * m], rstd = stats[2 * m + 1];
          const float* r = xp + m * D;
          const float* gr = gp + m * D;
          for (int64_t i = c0; i < c1; ++i) {
            dw[i] += gr[i] * ((r[i] - mu) * rstd);
            db[i] += gr[i];
          }
        }
      });
    Shape ws = w.defined() ? w.shape() : Shape{D};
    return std::vector<Tensor>{gx, gw ? reshape(gwt, ws) : Tensor(), gb ? reshape(gbt, ws) : Tensor()};
  });
}

Tensor batch_norm(const Tensor& x_in, Tensor running_mean, Tensor running_var, const Tensor& weight,
                  const Tensor& bias, bool training, float momentum, float eps) {
  detail::check_float(x_in, "batch_norm", "input");
  TESSERA_CHECK(x_in.dim() >= 2, "[batch_norm] input must be (N, C, ...), got ", shape_str(x_in.shape()));
  // N * C == 0: an empty batch (a data-parallel rank may get none in evaluation); no division by it.
  const int64_t N = x_in.shape()[0], C = x_in.shape()[1], S = N * C == 0 ? 0 : x_in.numel() / (N * C);
  for (const Tensor* p : std::initializer_list<const Tensor*>{&running_mean, &running_var, &weight, &bias})
    if (p->defined())
      TESSERA_CHECK(p->dtype() == DType::Float32 && p->dim() == 1 && p->shape()[0] == C, "[batch_norm] parameter/statistic ",
                    shape_str(p->shape()), " does not match ", C, " channels of input ", shape_str(x_in.shape()));
  TESSERA_CHECK(training || (running_mean.defined() && running_var.defined()),
                "[batch_norm] evaluation mode needs running_mean and running_var");
  const int64_t count = N * S;
  TESSERA_CHECK(!training || count > 1, "[batch_norm] training needs more than one value per channel, got input ",
                shape_str(x_in.shape()));
  Tensor x = detail::as_contiguous(x_in);
  const float* xp = x.data<float>();
  auto mean_rstd = std::make_shared<std::vector<float>>(2 * C);
  for (int64_t c = 0; c < C; ++c) {
    float mu, var;
    if (training) {
      double s = 0.0, ss = 0.0;
      for (int64_t n = 0; n < N; ++n) {
        const float* r = xp + (n * C + c) * S;
        for (int64_t i = 0; i < S; ++i) s += r[i];
      }
      mu = static_cast<float>(s / count);
      for (int64_t n = 0; n < N; ++n) {
        const float* r = xp + (n * C + c) * S;
        for (int64_t i = 0; i < S; ++i) ss += (r[i] - mu) * (r[i] - mu);
      }
      var = static_cast<float>(ss / count);
      if (running_mean.defined()) {
        float* rm = running_mean.data<float>() + c * running_mean.strides()[0];
        *rm = (1.0f - momentum) * *rm + momentum * mu;
      }
      if (running_var.defined()) {
        float* rv = running_var.data<float>() + c * running_var.strides()[0];
        *rv = (1.0f - momentum) * *rv + momentum * static_cast<float>(ss / (count - 1));
      }
    } else {
      mu = running_mean.data<float>()[c * running_mean.strides()[0]];
      var = running_var.data<float>()[c * running_var.strides()[0]];
    }
    (*mean_rstd)[2 * c] = mu;
    (*mean_rstd)[2 * c + 1] = 1.0f / std::sqrt(var + eps);
  }
  Tensor w = weight.defined() ? detail::as_contiguous(weight) : Tensor();
  Tensor b = bias.defined() ? detail::as_contiguous(bias) : Tensor();
  Tensor out = Tensor::empty(x.shape());
  float* op = out.data<float>();
  parallel_for(0, N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)), [&](int64_t s0, int64_t s1) {
    for (int64_t nc = s0; nc < s1; ++nc) {
      int64_t c = nc % C;
      float scale = (*mean_rstd)[2 * c + 1] * (w.defined() ? w.data<float>()[c] : 1.0f);
      float shift = (b.defined() ? b.data<float>()[c] : 0.0f) - (*mean_rstd)[2 * c] * scale;
      for (int64_t i = 0; i < S; ++i) op[nc * S + i] = xp[nc * S + i] * scale + shift;
    }
  });
  bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  return record(out, "BatchNormBackward", {x_in, weight, bias}, [x, w, mean_rstd, N, C, S, training, gw, gb](const Tensor& g_in) {
    Tensor g = detail::as_contiguous(g_in);
    Tensor gx = Tensor::empty(x.shape()), gwt = zeros({C}), gbt = zeros({C});
    const float* xp = x.data<float>();
    const float* gp = g.data<float>();
    float* dx = gx.data<float>();
    const float count = static_cast<float>(N * S);
    for (int64_t c = 0; c < C; ++c) {
      const float mu = (*mean_rstd)[2 * c], rstd = (*mean_rstd)[2 * c + 1];
      const float wc = w.defined() ? w.data<float>()[c] : 1.0f;
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          int64_t k = (n * C + c) * S + i;
          sum_g += gp[k];
          sum_gx += gp[k] * (xp[k] - mu) * rstd;
        }
      gwt.data<float>()[c] = static_cast<float>(sum_gx);
      gbt.data<float>()[c] = static_cast<float>(sum_g);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          int64_t k = (n * C + c) * S + i;
          if (training) {
            float xhat = (xp[k] - mu) * rstd;
            dx[k] = wc * rstd * (gp[k] - static_cast<float>(sum_g) / count - xhat * static_cast<float>(sum_gx) / count);
          } else {
            dx[k] = gp[k] * wc * rstd;
          }
        }
    }
    return std::vector<Tensor>{gx, gw ? gwt : Tensor(), gb ? gbt : Tensor()};
  });
}

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  detail::check_float(x, "dropout", "input");
  TESSERA_CHECK(p >= 0.0f && p <= 1.0f, "[dropout] probability must be in [0, 1], got ", p);
  if (!training || p == 0.0f) return x;
  Tensor mask = Tensor::empty(x.shape());
  float* m = mask.data<float>();
  const float keep_scale = p == 1.0f ? 0.0f : 1.0f / (1.0f - p);
  for (int64_t i = 0; i < mask.numel(); ++i) m[i] = gen.uniform() >= p ? keep_scale : 0.0f;
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(x, mask);
  }
  return record(out, "DropoutBackward", {x}, [mask](const Tensor& g) { return std::vector<Tensor>{mul(g, mask)}; }, autograd::Saves::Nothing);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  detail::check_float(q, "scaled_dot_product_attention", "q");
  detail::check_float(k, "scaled_dot_product_attention", "k");
  detail::check_float(v, "scaled_dot_product_attention", "v");
  TESSERA_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim() && q.shape().back() == k.shape().back() &&
                    k.shape()[k.dim() - 2] == v.shape()[v.dim() - 2],
                "[scaled_dot_product_attention] incompatible q ", shape_str(q.shape()), ", k ", shape_str(k.shape()),
                ", v ", shape_str(v.shape()), " (expected (..., T, D) each, with k and v of equal length)");
  const int64_t D = q.shape().back();
  // Under `causal` query i sees keys j <= i + (Tk - Tq), so a query block at the end of a longer key
  // cache works.
  Tensor scores = matmul(q, transpose(k, -2, -1));
  return matmul(attention_weights(scores, 1.0f / std::sqrt(static_cast<float>(D)), causal), v);
}

}  // namespace tessera
