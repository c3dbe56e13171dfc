#include "tessera/parallel/sync_batch_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"
#include "tessera/util/thread_pool.h"

namespace tessera::parallel {

namespace {

// Why a fused op with its own backward rather than a composition of ops around all_reduce_sum
// (functional.h), which would also be exact: the composition keeps x, x - mean, x̂ and x̂·w alive for
// its backward — four activation-sized tensors per layer instead of one — and takes six passes over
// the activations instead of two. The backward here is nn's batch_norm backward with its two
// per-channel sums, Σdy and Σdy·x̂, replaced by their all-reduced values; the single-process
// gradient depends on the other rows only through those two sums, so the result is exact.
Tensor sync_batch_norm_train(const Tensor& x_in, Tensor& running_mean, Tensor& running_var, const Tensor& weight,
                             const Tensor& bias, float momentum, float eps, dist::ProcessGroupPtr group) {
  const int64_t N = x_in.shape()[0], C = x_in.shape()[1];
  const int64_t S = N * C == 0 ? 0 : x_in.numel() / (N * C);
  Tensor x, w, b;
  {
    NoGradGuard no_grad;  // plain copies for the kernels; the record below is the op
    x = x_in.contiguous();
    w = weight.contiguous();
    b = bias.contiguous();
  }
  const float* xp = x.data<float>();

  // [Σx (C) | Σx² (C) | count], local, then global. Sums in double here; the wire is float32 (the
  // backends reduce float32, int64 and bfloat16). count is exact below 2^24 values per channel.
  Tensor stats = zeros({2 * C + 1});
  float* st = stats.data<float>();
  for (int64_t c = 0; c < C; ++c) {
    double s = 0.0, ss = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      const float* r = xp + (n * C + c) * S;
      for (int64_t i = 0; i < S; ++i) {
        s += r[i];
        ss += static_cast<double>(r[i]) * r[i];
      }
    }
    st[c] = static_cast<float>(s);
    st[C + c] = static_cast<float>(ss);
  }
  st[2 * C] = static_cast<float>(N * S);
  group->blocking_allreduce(stats, dist::ReduceOp::Sum);
  const double count = st[2 * C];
  // Every rank sees the same global count, so all of them raise here together (none is left waiting).
  TESSERA_CHECK(count > 1, "[SyncBatchNorm] training needs more than one value per channel over the group, got ",
                count, " (rank ", group->rank(), " input ", shape_str(x_in.shape()), ")");

  auto mean_rstd = std::make_shared<std::vector<float>>(2 * C);  // (C) means, (C) 1/sqrt(var + eps)
  for (int64_t c = 0; c < C; ++c) {
    const double mean = st[c] / count, var = std::max(0.0, st[C + c] / count - mean * mean);
    (*mean_rstd)[c] = static_cast<float>(mean);
    (*mean_rstd)[C + c] = static_cast<float>(1.0 / std::sqrt(var + eps));
    float* rm = running_mean.data<float>() + c;
    float* rv = running_var.data<float>() + c;
    *rm = (1.0f - momentum) * *rm + momentum * static_cast<float>(mean);
    *rv = (1.0f - momentum) * *rv + momentum * static_cast<float>(var * count / (count - 1));
  }

  Tensor out = Tensor::empty(x.shape());
  float* op = out.data<float>();
  parallel_for(0, N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)), [&](int64_t s0, int64_t s1) {
    for (int64_t nc = s0; nc < s1; ++nc) {
      const int64_t c = nc % C;
      const float scale = (*mean_rstd)[C + c] * w.data<float>()[c];
      const float shift = b.data<float>()[c] - (*mean_rstd)[c] * scale;
      for (int64_t i = 0; i < S; ++i) op[nc * S + i] = xp[nc * S + i] * scale + shift;
    }
  });

  const bool gw = weight.requires_grad(), gb = bias.requires_grad();
  return autograd::record(out, "SyncBatchNormBackward", {x_in, weight, bias},
                          [x, w, mean_rstd, N, C, S, count, group, gw, gb](const Tensor& g_in) {
    Tensor g = g_in.contiguous();
    const float* xp = x.data<float>();
    const float* gp = g.data<float>();
    // (2C): [Σdy | Σdy·x̂] per channel; the local values are the weight/bias gradients.
    Tensor sums = zeros({2 * C});
    float* su = sums.data<float>();
    for (int64_t c = 0; c < C; ++c) {
      const double mu = (*mean_rstd)[c], rstd = (*mean_rstd)[C + c];
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t k = (n * C + c) * S + i;
          sum_g += gp[k];
          sum_gx += gp[k] * (xp[k] - mu) * rstd;
        }
      su[c] = static_cast<float>(sum_g);
      su[C + c] = static_cast<float>(sum_gx);
    }
    Tensor gb_t = gb ? sums.slice(0, 0, C).clone() : Tensor();
    Tensor gw_t = gw ? sums.slice(0, C, 2 * C).clone() : Tensor();
    group->blocking_allreduce(sums, dist::ReduceOp::Sum);
    Tensor gx = Tensor::empty(x.shape());
    float* dx = gx.data<float>();
    parallel_for(0, N * C, std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)), [&](int64_t s0, int64_t s1) {
      for (int64_t nc = s0; nc < s1; ++nc) {
        const int64_t c = nc % C;
        const float mu = (*mean_rstd)[c], rstd = (*mean_rstd)[C + c];
        const float mean_g = static_cast<float>(su[c] / count), mean_gx = static_cast<float>(su[C + c] / count);
        const float scale = w.data<float>()[c] * rstd;
        for (int64_t i = 0; i < S; ++i) {
          const int64_t k = nc * S + i;
          dx[k] = scale * (gp[k] - mean_g - (xp[k] - mu) * rstd * mean_gx);
        }
      }
    });
    return std::vector<Tensor>{gx, gw_t, gb_t};
  });
}

}  // namespace

SyncBatchNorm::SyncBatchNorm(int64_t n, dist::ProcessGroupPtr group, float eps_, float momentum_)
    : eps(eps_), momentum(momentum_), group_(std::move(group)) {
  TESSERA_CHECK(n > 0, "[SyncBatchNorm] num_features must be positive, got ", n);
  check_group();
  weight = register_parameter("weight", ones({n}));
  bias = register_parameter("bias", zeros({n}));
  running_mean = register_buffer("running_mean", zeros({n}));
  running_var = register_buffer("running_var", ones({n}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::Int64));
}

SyncBatchNorm::SyncBatchNorm(const nn::BatchNorm& source, dist::ProcessGroupPtr group)
    : eps(source.eps), momentum(source.momentum), group_(std::move(group)) {
  check_group();
  weight = register_parameter("weight", source.weight, source.weight.requires_grad());
  bias = register_parameter("bias", source.bias, source.bias.requires_grad());
  running_mean = register_buffer("running_mean", source.running_mean);
  running_var = register_buffer("running_var", source.running_var);
  num_batches_tracked = register_buffer("num_batches_tracked", source.num_batches_tracked);
  train(source.is_training());
}

void SyncBatchNorm::check_group() const {
  TESSERA_CHECK(group_ != nullptr, "[SyncBatchNorm] needs a process group (dist::init_process_group() gives one, "
                "a group of one in a single process)");
}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  const int64_t C = weight.shape()[0];
  TESSERA_CHECK(x.defined() && x.dtype() == DType::Float32 && x.dim() >= 2 && x.shape()[1] == C,
                "[SyncBatchNorm] expected a float32 (N, ", C, ", ...) input, got ",
                x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"), " on rank ", group_->rank());
  if (!is_training()) return batch_norm(x, running_mean, running_var, weight, bias, false, momentum, eps);
  num_batches_tracked.data<int64_t>()[0] += 1;
  return sync_batch_norm_train(x, running_mean, running_var, weight, bias, momentum, eps, group_);
}

namespace {

struct BatchNormSite {
  nn::Module* parent;
  size_t index;  // in parent->children()
  std::string path;
};

void find_batch_norms(nn::Module& module, const std::string& prefix, std::vector<BatchNormSite>& out) {
  for (size_t i = 0; i < module.children().size(); ++i) {
    const auto& [name, child] = module.children()[i];
    if (std::dynamic_pointer_cast<nn::BatchNorm>(child)) out.push_back({&module, i, prefix + name});
    else find_batch_norms(*child, prefix + name + ".", out);
  }
}

}  // namespace

std::shared_ptr<nn::Module> convert_sync_batchnorm(const std::shared_ptr<nn::Module>& module,
                                                   const dist::ProcessGroupPtr& group) {
  TESSERA_CHECK(module != nullptr, "[convert_sync_batchnorm] module is null");
  TESSERA_CHECK(group != nullptr, "[convert_sync_batchnorm] needs a process group");
  if (auto bn = std::dynamic_pointer_cast<nn::BatchNorm>(module)) return std::make_shared<SyncBatchNorm>(*bn, group);
  std::vector<BatchNormSite> sites;
  find_batch_norms(*module, "", sites);
  // Check every site before changing any, so an error leaves the model as it was. A use count above
  // one means a pointer besides the parent's children entry (nothing here holds a copy).
  for (const auto& s : sites) {
    const auto& child = s.parent->children()[s.index].second;
    TESSERA_CHECK(child.use_count() == 1, "[convert_sync_batchnorm] the ", child->name(), " at '", s.path,
                  "' is also held ", child.use_count() - 1, " time(s) outside ", s.parent->name(),
                  "'s children (a typed member its forward calls?), so that layer would keep normalising with local "
                  "statistics; build the model with parallel::SyncBatchNorm instead, or drop the other reference");
  }
  for (const auto& s : sites) {
    const auto& [name, child] = s.parent->children()[s.index];
    auto sync = std::make_shared<SyncBatchNorm>(static_cast<const nn::BatchNorm&>(*child), group);
    s.parent->replace_child(name, sync);
  }
  return module;
}

}  // namespace tessera::parallel
