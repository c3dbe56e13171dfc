// The CPU's row kernels: softmax and log-softmax, attention's weights, cross-entropy, layer and
// batch normalisation. Each works on a contiguous (M, D) view of its input, rows split across the
// intra-op threads.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/backend/cpu/cpu_kernels.h"
#include "tessera/backend/cpu/vector_math.h"
#include "tessera/ops/detail.h"
#include "tessera/util/thread_pool.h"

namespace tessera::cpu {

namespace row_loops {

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

// The last dim's size (a 0-dim tensor is one row of one) and the number of rows.
int64_t row_size(const Tensor& t) { return t.dim() == 0 ? 1 : t.shape().back(); }
int64_t row_count(const Tensor& t) { return row_size(t) == 0 ? 0 : t.numel() / row_size(t); }

// How many keys attention's row m sees: all, or under `causal` i + (Tk - Tq) + 1 of them (none is
// a row of NaN, as softmax gives a row that is all -inf).
struct VisibleKeys {
  int64_t Tq, Tk;
  bool causal;
  int64_t operator()(int64_t m) const { return causal ? std::clamp<int64_t>(m % Tq + (Tk - Tq) + 1, 0, Tk) : Tk; }
};

}  // namespace row_loops

using namespace row_loops;

Tensor CpuKernels::softmax(const Tensor& t, bool log_space) const {
  const int64_t D = row_size(t), M = row_count(t);
  return row_forward(t, D, M, [D, log_space](int64_t, const float* xr, float* yr) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < D; ++i) mx = std::max(mx, xr[i]);
    if (!std::isfinite(mx) || any_nan(xr, D)) {  // NaN, ±inf or an all-masked row: libm's rules
      float s = 0.0f;
      for (int64_t i = 0; i < D; ++i) s += std::exp(xr[i] - mx);
      const float lse = mx + std::log(s), inv = 1.0f / s;
      for (int64_t i = 0; i < D; ++i) yr[i] = log_space ? xr[i] - lse : std::exp(xr[i] - mx) * inv;
      return;
    }
    // Every xr[i] - mx is now <= 0 or -inf (a masked score). Each exponential is computed once,
    // vectorised, into the output row, which is then summed and scaled: libm's expf, called twice
    // per element, was 8% of the GPT's bf16 step.
    for (int64_t i = 0; i < D; ++i) yr[i] = exp_nonpositive(xr[i] - mx);
    const float s = sum_in_lanes(yr, D);
    if (log_space) {
      const float lse = mx + std::log(s);
      for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] - lse;
    } else {
      const float inv = 1.0f / s;
      for (int64_t i = 0; i < D; ++i) yr[i] *= inv;
    }
  });
}

Tensor CpuKernels::softmax_backward(const Tensor& out, const Tensor& g, bool log_space) const {
  const int64_t D = row_size(out), M = row_count(out);
  return row_backward(out, g, D, M, [D, log_space](int64_t, const float* gr, const float* yr, float* dr) {
    if (log_space) {
      const float s = sum_in_lanes(gr, D);
      for (int64_t i = 0; i < D; ++i) dr[i] = gr[i] - std::exp(yr[i]) * s;
    } else {
      for (int64_t i = 0; i < D; ++i) dr[i] = gr[i] * yr[i];  // the products, then their sum
      const float s = sum_in_lanes(dr, D);
      for (int64_t i = 0; i < D; ++i) dr[i] = yr[i] * (gr[i] - s);
    }
  });
}

// One pass each way instead of four (a scale, a mask built for the call and filled in, a softmax;
// and the backward of each), and the masked keys' exponentials are never computed; the GPT's steps
// spent 1-2% on those passes. The arithmetic is the four ops' own, in their order: the weights and
// gradients are the same bits.
Tensor CpuKernels::attention_weights(const Tensor& scores, float scale, bool causal) const {
  const int64_t Tq = scores.shape()[scores.dim() - 2], Tk = scores.shape().back();
  const int64_t M = Tk == 0 ? 0 : scores.numel() / Tk;
  const VisibleKeys visible{Tq, Tk, causal};
  return row_forward(scores, Tk, M, [scale, visible, Tk](int64_t m, const float* xr, float* yr) {
    const int64_t n = visible(m);
    // The scaled scores go through the output row, as the scale's own output did: computed in
    // the exponential's argument, scale · x - max could be contracted into one FMA and round
    // differently.
    for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * scale;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, yr[j]);
    if (!std::isfinite(mx) || any_nan(yr, n)) {  // NaN, ±inf or nothing visible: libm's rules, as softmax's
      for (int64_t j = n; j < Tk; ++j) yr[j] = -std::numeric_limits<float>::infinity();
      float s = 0.0f;
      for (int64_t j = 0; j < Tk; ++j) s += std::exp(yr[j] - mx);
      const float inv = 1.0f / s;
      for (int64_t j = 0; j < Tk; ++j) yr[j] = std::exp(yr[j] - mx) * inv;
      return;
    }
    for (int64_t j = 0; j < n; ++j) yr[j] = exp_nonpositive(yr[j] - mx);
    for (int64_t j = n; j < Tk; ++j) yr[j] = 0.0f;
    const float inv = 1.0f / sum_in_lanes(yr, Tk);
    for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
  });
}

Tensor CpuKernels::attention_weights_backward(const Tensor& out, const Tensor& g, float scale, bool causal) const {
  const int64_t Tq = out.shape()[out.dim() - 2], Tk = out.shape().back();
  const int64_t M = Tk == 0 ? 0 : out.numel() / Tk;
  const VisibleKeys visible{Tq, Tk, causal};
  return row_backward(out, g, Tk, M, [scale, visible, Tk](int64_t m, const float* gr, const float* yr, float* dr) {
    const int64_t n = visible(m);
    for (int64_t j = 0; j < Tk; ++j) dr[j] = gr[j] * yr[j];  // softmax's backward
    const float s = sum_in_lanes(dr, Tk);
    for (int64_t j = 0; j < n; ++j) dr[j] = yr[j] * (gr[j] - s) * scale;  // then the scale's
    for (int64_t j = n; j < Tk; ++j) dr[j] = 0.0f;                          // masked: the fill's
  });
}

CrossEntropyResult CpuKernels::cross_entropy(const Tensor& logits, const Tensor& targets,
                                             const CrossEntropyOptions& opt) const {
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
  Tensor lse = Tensor::empty({N});
  float* lp = lse.data<float>();
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
    lp[i] = l;
    total += (1.0f - eps) * (l - r[t[i]]) + eps * (l - row_sum / C);
  }
  Tensor loss = scalar_tensor(count ? static_cast<float>(total / count) : std::numeric_limits<float>::quiet_NaN());
  return {loss, lse, count};
}

Tensor CpuKernels::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                          const Tensor& g, const CrossEntropyOptions& opt, int64_t count) const {
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  Tensor grad = zeros({N, C});
  if (count == 0) return grad;
  const float eps = opt.label_smoothing;
  const float scale = g.item<float>() / static_cast<float>(count);
  const float* x = logits.data<float>();
  const int64_t* t = targets.data<int64_t>();
  const float* lp = lse.data<float>();
  float* d = grad.data<float>();
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] == opt.ignore_index) continue;
    const float* r = x + i * C;
    float* dr = d + i * C;
    float l = lp[i];
    for (int64_t c = 0; c < C; ++c) dr[c] = (std::exp(r[c] - l) - eps / C) * scale;
    dr[t[i]] -= (1.0f - eps) * scale;
  }
  return grad;
}

WithSaved CpuKernels::layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, int64_t D, float eps) const {
  const int64_t M = D == 0 ? 0 : x.numel() / D;
  Tensor out = Tensor::empty(x.shape());
  Tensor mean_rstd = Tensor::empty({M, 2});
  float* stats = mean_rstd.data<float>();
  const float* xp = x.data<float>();
  const float* wp = w.defined() ? w.data<float>() : nullptr;
  const float* bp = b.defined() ? b.data<float>() : nullptr;
  float* op = out.data<float>();
  // Row statistics from lane sums (sum_in_lanes), which vectorise where one running sum does not.
  parallel_for(0, M, row_grain(D), [&](int64_t s, int64_t e) {
    for (int64_t m = s; m < e; ++m) {
      const float* r = xp + m * D;
      float* o = op + m * D;
      const float mu = sum_in_lanes(r, D) / static_cast<float>(D);
      for (int64_t i = 0; i < D; ++i) o[i] = r[i] - mu;
      const float var = dot_in_lanes(o, o, D) / static_cast<float>(D);
      const float rstd = 1.0f / std::sqrt(var + eps);
      stats[2 * m] = mu;
      stats[2 * m + 1] = rstd;
      for (int64_t i = 0; i < D; ++i) o[i] = o[i] * rstd * (wp ? wp[i] : 1.0f) + (bp ? bp[i] : 0.0f);
    }
  });
  return {out, mean_rstd};
}

LayerGrads CpuKernels::layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean_rstd,
                                          const Tensor& g_in, int64_t D, bool gw, bool gb) const {
  const int64_t M = D == 0 ? 0 : x.numel() / D;
  Tensor g = detail::as_contiguous(g_in);
  Tensor gx = Tensor::empty(x.shape());
  Tensor gwt = zeros({D}), gbt = zeros({D});
  const float* xp = x.data<float>();
  const float* gp = g.data<float>();
  const float* wp = w.defined() ? w.data<float>() : nullptr;
  float* dx = gx.data<float>();
  float* dw = gwt.data<float>();
  float* db = gbt.data<float>();
  const float* stats = mean_rstd.data<float>();
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
      const float mean_g = sum_in_lanes(gh.data(), D) / static_cast<float>(D);
      const float mean_gx = dot_in_lanes(gh.data(), xhat, D) / static_cast<float>(D);
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
  return {gx, gw ? gwt : Tensor(), gb ? gbt : Tensor()};
}

WithSaved CpuKernels::batch_norm(const Tensor& x, Tensor& running_mean, Tensor& running_var, const Tensor& w,
                                 const Tensor& b, bool training, float momentum, float eps) const {
  const int64_t N = x.shape()[0], C = x.shape()[1], S = N * C == 0 ? 0 : x.numel() / (N * C);
  const int64_t count = N * S;
  const float* xp = x.data<float>();
  Tensor mean_rstd = Tensor::empty({C, 2});
  float* stats = mean_rstd.data<float>();
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
    stats[2 * c] = mu;
    stats[2 * c + 1] = 1.0f / std::sqrt(var + eps);
  }
  Tensor out = Tensor::empty(x.shape());
  float* op = out.data<float>();
  parallel_for(0, N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)), [&](int64_t s0, int64_t s1) {
    for (int64_t nc = s0; nc < s1; ++nc) {
      int64_t c = nc % C;
      float scale = stats[2 * c + 1] * (w.defined() ? w.data<float>()[c] : 1.0f);
      float shift = (b.defined() ? b.data<float>()[c] : 0.0f) - stats[2 * c] * scale;
      for (int64_t i = 0; i < S; ++i) op[nc * S + i] = xp[nc * S + i] * scale + shift;
    }
  });
  return {out, mean_rstd};
}

LayerGrads CpuKernels::batch_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean_rstd,
                                          const Tensor& g_in, bool training, bool gw, bool gb) const {
  const int64_t N = x.shape()[0], C = x.shape()[1], S = N * C == 0 ? 0 : x.numel() / (N * C);
  Tensor g = detail::as_contiguous(g_in);
  Tensor gx = Tensor::empty(x.shape()), gwt = zeros({C}), gbt = zeros({C});
  const float* xp = x.data<float>();
  const float* gp = g.data<float>();
  const float* stats = mean_rstd.data<float>();
  float* dx = gx.data<float>();
  const float count = static_cast<float>(N * S);
  for (int64_t c = 0; c < C; ++c) {
    const float mu = stats[2 * c], rstd = stats[2 * c + 1];
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
  return {gx, gw ? gwt : Tensor(), gb ? gbt : Tensor()};
}

}  // namespace tessera::cpu
