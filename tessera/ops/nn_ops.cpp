// Neural-network functions: softmax family, losses, embedding, normalisation, dropout, attention.
// Validation and autograd here; the row kernels are the table's (kernels.h; the CPU's in
// backend/cpu/cpu_rows.cpp and cpu_index.cpp). A row kernel works on the last dim of a contiguous
// input; other dims are moved there by a transpose, which autograd differentiates like any view.
#include <cmath>

#include "tessera/ops/detail.h"
#include "tessera/ops/kernels.h"

namespace tessera {

using autograd::record;

namespace {

// Softmax or log-softmax over the last dim.
Tensor softmax_last(const Tensor& t_in, bool log_space) {
  Tensor t = detail::as_contiguous(t_in);
  Tensor out = kernels_for(t).softmax(t, log_space);
  Tensor saved = out.detach();
  return record(out, log_space ? "LogSoftmaxBackward" : "SoftmaxBackward", {t_in}, [saved, log_space](const Tensor& g) {
    return std::vector<Tensor>{kernels_for(saved).softmax_backward(saved, g, log_space)};
  }, autograd::Saves::Nothing);
}

// Attention's weights from its raw scores (..., Tq, Tk): softmax(scale · scores) over the last dim,
// where under `causal` query i sees keys j <= i + (Tk - Tq) only, in one kernel each way.
Tensor attention_weights(const Tensor& scores_in, float scale, bool causal) {
  Tensor scores = detail::as_contiguous(scores_in);
  Tensor out = kernels_for(scores).attention_weights(scores, scale, causal);
  Tensor saved = out.detach();
  return record(out, "AttentionWeightsBackward", {scores_in}, [saved, scale, causal](const Tensor& g) {
    return std::vector<Tensor>{kernels_for(saved).attention_weights_backward(saved, g, scale, causal)};
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
  detail::check_same_device(logits_in, targets_in, "cross_entropy");
  Tensor logits = detail::as_contiguous(logits_in), targets = detail::as_contiguous(targets_in);
  CrossEntropyResult result = kernels_for(logits).cross_entropy(logits, targets, opt);
  const Tensor lse = result.lse;
  const int64_t count = result.count;
  return record(result.loss, "CrossEntropyBackward", {logits_in}, [logits, targets, lse, count, opt](const Tensor& g) {
    return std::vector<Tensor>{kernels_for(logits).cross_entropy_backward(logits, targets, lse, g, opt, count)};
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
  detail::check_same_device(weight_in, indices_in, "embedding");
  Tensor weight = detail::as_contiguous(weight_in), indices = detail::as_contiguous(indices_in);
  const int64_t V = weight.shape()[0];
  Tensor out = kernels_for(weight).embedding(weight, indices);
  return record(out, "EmbeddingBackward", {weight_in}, [indices, V](const Tensor& g) {
    return std::vector<Tensor>{kernels_for(g).embedding_backward(g, indices, V)};
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
  const int64_t D = shape_numel(normalized_shape);
  auto [out, mean_rstd] = kernels_for(x).layer_norm(x, w, b, D, eps);
  const Tensor stats = mean_rstd;
  bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  return record(out, "LayerNormBackward", {x_in, weight, bias}, [x, w, stats, D, gw, gb](const Tensor& g) {
    LayerGrads grads = kernels_for(x).layer_norm_backward(x, w, stats, g, D, gw, gb);
    const Shape ws = w.defined() ? w.shape() : Shape{D};
    return std::vector<Tensor>{grads.x, gw ? reshape(grads.weight, ws) : Tensor(),
                               gb ? reshape(grads.bias, ws) : Tensor()};
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
  Tensor w = weight.defined() ? detail::as_contiguous(weight) : Tensor();
  Tensor b = bias.defined() ? detail::as_contiguous(bias) : Tensor();
  auto [out, mean_rstd] = kernels_for(x).batch_norm(x, running_mean, running_var, w, b, training, momentum, eps);
  const Tensor stats = mean_rstd;
  bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  return record(out, "BatchNormBackward", {x_in, weight, bias}, [x, w, stats, training, gw, gb](const Tensor& g) {
    LayerGrads grads = kernels_for(x).batch_norm_backward(x, w, stats, g, training, gw, gb);
    return std::vector<Tensor>{grads.x, grads.weight, grads.bias};
  });
}

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  detail::check_float(x, "dropout", "input");
  TESSERA_CHECK(p >= 0.0f && p <= 1.0f, "[dropout] probability must be in [0, 1], got ", p);
  if (!training || p == 0.0f) return x;
  Tensor mask = kernels_for(x).dropout_mask(x.shape(), x.device(), p, gen);
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
