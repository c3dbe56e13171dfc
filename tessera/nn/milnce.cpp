#include "tessera/nn/milnce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/functional.h"

namespace tessera::nn {

VideoEncoder::VideoEncoder(const MilNceConfig& c)
    : fc1(register_module("fc1", std::make_shared<Linear>(c.feature_dim, c.hidden))),
      fc2(register_module("fc2", std::make_shared<Linear>(c.hidden, c.embed_dim))) {}

Tensor VideoEncoder::forward(const Tensor& clips) {
  TESSERA_CHECK(clips.dim() == 3, "[VideoEncoder] expects clips (B, T, F), got ", shape_str(clips.shape()));
  TESSERA_CHECK(clips.shape()[2] == fc1->weight.shape()[1], "[VideoEncoder] clips have ", clips.shape()[2],
                " features per frame, the encoder ", fc1->weight.shape()[1]);
  Tensor pooled = mean(clips, {1});  // temporal pooling
  return l2_normalize((*fc2)(relu((*fc1)(pooled))));
}

TextEncoder::TextEncoder(const MilNceConfig& c)
    : bag(register_module("bag", std::make_shared<EmbeddingBag>(c.vocab, c.embed_dim))),
      proj(register_module("proj", std::make_shared<Linear>(c.embed_dim, c.embed_dim))) {}

Tensor TextEncoder::forward(const Tensor& words) {
  TESSERA_CHECK(words.dim() == 2 || words.dim() == 3, "[TextEncoder] expects word ids (B, L) or (B, K, L), got ",
                shape_str(words.shape()));
  if (words.dim() == 2) return l2_normalize((*proj)((*bag)(words)));
  const int64_t b = words.shape()[0], k = words.shape()[1], l = words.shape()[2];
  Tensor flat = (*proj)((*bag)(reshape(words, {b * k, l})));
  return reshape(l2_normalize(flat), {b, k, flat.shape()[1]});
}

TransformerTextEncoder::TransformerTextEncoder(const MilNceConfig& c)
    : embed(register_module("embed", std::make_shared<GptEmbedding>(std::make_shared<Embedding>(c.vocab, c.embed_dim),
                                                                     std::make_shared<Embedding>(c.words, c.embed_dim),
                                                                     std::make_shared<Dropout>(0.0f)))),
      ln_f(register_module("ln_f", std::make_shared<LayerNorm>(Shape{c.embed_dim}))),
      proj(register_module("proj", std::make_shared<Linear>(c.embed_dim, c.embed_dim))) {
  TESSERA_CHECK(c.layers >= 1 && c.heads >= 1 && c.embed_dim % c.heads == 0, "[TransformerTextEncoder] ", c.layers,
                " layers of ", c.heads, " heads over ", c.embed_dim, " dimensions: the heads must divide them");
  for (int64_t i = 0; i < c.layers; ++i)
    blocks.push_back(register_module("h" + std::to_string(i), std::make_shared<TransformerBlock>(c.embed_dim, c.heads)));
}

Tensor TransformerTextEncoder::forward(const Tensor& words) {
  TESSERA_CHECK(words.dim() == 2 || words.dim() == 3, "[TransformerTextEncoder] expects word ids (B, L) or (B, K, L), got ",
                shape_str(words.shape()));
  const int64_t l = words.shape()[words.dim() - 1];
  TESSERA_CHECK(l <= embed->wpe->weight.shape()[0], "[TransformerTextEncoder] narrations of ", l,
                " words, the encoder takes ", embed->wpe->weight.shape()[0]);
  const Tensor ids = contiguous(reshape(words, {-1, l}));
  const int64_t n = ids.shape()[0];
  Tensor x = (*embed)(ids);
  for (auto& block : blocks) x = (*block)(x);
  x = (*ln_f)(x);
  // The mean over the words, padding (id 0) left out; a narration of padding alone gives zeros.
  std::vector<float> weights(static_cast<size_t>(n * l));
  const int64_t* id = ids.data<int64_t>();
  for (int64_t r = 0; r < n; ++r) {
    int64_t count = 0;
    for (int64_t t = 0; t < l; ++t) count += id[r * l + t] != 0;
    for (int64_t t = 0; t < l; ++t)
      weights[static_cast<size_t>(r * l + t)] = id[r * l + t] != 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  }
  Tensor pooled = sum(mul(x, from_vector(weights, {n, l, 1})), {1});
  Tensor out = l2_normalize((*proj)(pooled));
  if (words.dim() == 2) return out;
  return reshape(out, {words.shape()[0], words.shape()[1], out.shape()[1]});
}

MilNceModel::MilNceModel(const MilNceConfig& c)
    : video(register_module("video", std::make_shared<VideoEncoder>(c))),
      text(c.text == "transformer" ? register_module<Module>("text", std::make_shared<TransformerTextEncoder>(c))
                                   : register_module<Module>("text", std::make_shared<TextEncoder>(c))),
      config_(c) {
  TESSERA_CHECK(c.text == "bag" || c.text == "transformer", "[MilNceModel] the text branch is 'bag' or 'transformer', not '",
                c.text, "'");
}

Tensor MilNceModel::forward(const Tensor& packed) {
  const int64_t t = config_.frames, f = config_.feature_dim, k = config_.candidates, l = config_.words;
  TESSERA_CHECK(packed.dim() == 2 && packed.shape()[1] == t * f + k * l, "[MilNceModel] expects packed clips (B, ",
                t * f + k * l, ") = ", t, "x", f, " features + ", k, "x", l, " word ids, got ", shape_str(packed.shape()));
  const int64_t b = packed.shape()[0];
  Tensor clips = reshape(contiguous(slice(packed, 1, 0, t * f)), {b, t, f});
  Tensor words = reshape(to_dtype(contiguous(slice(packed, 1, t * f, t * f + k * l)).detach(), DType::Int64), {b, k, l});
  return cat({unsqueeze((*video)(clips), 1), (*text)(words)}, 1);
}

Tensor pack_clip_text(const Tensor& clips, const Tensor& words) {
  TESSERA_CHECK(clips.dim() == 3 && words.dim() == 3 && clips.shape()[0] == words.shape()[0],
                "[pack_clip_text] expects clips (B, T, F) and words (B, K, L), got ", shape_str(clips.shape()), " and ",
                shape_str(words.shape()));
  const int64_t b = clips.shape()[0];
  return cat({reshape(contiguous(clips), {b, -1}), to_dtype(reshape(contiguous(words), {b, -1}), DType::Float32)}, 1);
}

Tensor mil_nce_loss_of(const Tensor& output, float temperature, dist::ProcessGroup* group) {
  TESSERA_CHECK(output.dim() == 3 && output.shape()[1] >= 2, "[mil_nce_loss] expects MilNceModel's output (B, 1 + K, D), got ",
                shape_str(output.shape()));
  return mil_nce_loss(squeeze(slice(output, 1, 0, 1), 1), slice(output, 1, 1, output.shape()[1]), temperature, group);
}

int64_t in_batch_hits(const Tensor& output, float temperature) {
  NoGradGuard no_grad;
  const int64_t b = output.shape()[0], k = output.shape()[1] - 1, d = output.shape()[2];
  const Tensor video = contiguous(squeeze(slice(output, 1, 0, 1), 1));
  const Tensor text = contiguous(reshape(slice(output, 1, 1, k + 1), {b * k, d}));
  // scores[i][j]: clip i's narrations pooled by log-sum-exp against video j, as the loss pools them.
  const Tensor pooled = logsumexp(reshape(mul(matmul(video, transpose(text, 0, 1)), 1.0f / temperature), {b, b, k}), 2);
  const std::vector<float> scores = contiguous(transpose(pooled, 0, 1)).to_vector<float>();  // [text i][video j]
  int64_t hits = 0;
  for (int64_t i = 0; i < b; ++i) {
    bool best = true;  // ties count against it
    for (int64_t j = 0; j < b && best; ++j)
      if (j != i && scores[static_cast<size_t>(i * b + j)] >= scores[static_cast<size_t>(i * b + i)]) best = false;
    hits += best;
  }
  return hits;
}

Tensor l2_normalize(const Tensor& x, float eps) {
  Tensor norm = sqrt(add(sum(mul(x, x), {x.dim() - 1}, true), eps));
  return div(x, norm);
}

Tensor logsumexp(const Tensor& x, int64_t dim) {
  // The maximum is a constant for the gradient: d/dx of m + log Σ e^{x-m} is softmax(x) for any m.
  Tensor m = max(x, dim, true).values.detach();
  return squeeze(add(log(sum(exp(sub(x, m)), {dim}, true)), m), dim);
}

namespace {

// Row counts of every rank (in rank order), exchanged once per call: ranks may hold uneven batches.
std::vector<int64_t> rows_per_rank(int64_t rows, dist::ProcessGroup& group) {
  Tensor mine = full({1}, static_cast<float>(rows));
  Tensor all = zeros({group.size()});
  group.allgather(mine, all)->wait();
  std::vector<int64_t> out;
  for (float v : all.to_vector<float>()) out.push_back(static_cast<int64_t>(v));
  return out;
}

}  // namespace

Tensor mil_nce_loss(const Tensor& video, const Tensor& text, float temperature, dist::ProcessGroup* group) {
  TESSERA_CHECK(video.dim() == 2 && text.dim() == 3 && text.shape()[0] == video.shape()[0] &&
                    text.shape()[2] == video.shape()[1],
                "[mil_nce_loss] expects video (B, D) and text (B, K, D), got ", shape_str(video.shape()), " and ",
                shape_str(text.shape()));
  TESSERA_CHECK(temperature > 0, "[mil_nce_loss] temperature must be positive, got ", temperature);
  const int64_t b = video.shape()[0], k = text.shape()[1], d = video.shape()[1];
  int64_t offset = 0;  // the global index of this rank's first clip
  Tensor all_video = video, all_text = text;
  if (group != nullptr && group->size() > 1) {
    const std::vector<int64_t> rows = rows_per_rank(b, *group);
    for (int r = 0; r < group->rank(); ++r) offset += rows[static_cast<size_t>(r)];
    all_video = parallel::all_gather_with_grad(video, *group);
    all_text = reshape(parallel::all_gather_with_grad(reshape(text, {b, k * d}), *group), {-1, k, d});
  }
  const int64_t n = all_video.shape()[0];
  const float inv_t = 1.0f / temperature;
  // Video i against every candidate of every clip: (B, N·K); its own K candidates are the positives.
  Tensor video_to_text = mul(matmul(video, transpose(reshape(all_text, {n * k, d}), 0, 1)), inv_t);
  // Each of clip i's candidates against every video: (B, K·N); its own video is a positive already
  // counted above, so it is masked here.
  Tensor text_to_video = mul(reshape(matmul(text, transpose(all_video, 0, 1)), {b, k * n}), inv_t);
  std::vector<float> not_positive(static_cast<size_t>(b * n * k), 1.0f), own_video(static_cast<size_t>(b * k * n), 0.0f);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t c = 0; c < k; ++c) {
      not_positive[static_cast<size_t>(i * n * k + (offset + i) * k + c)] = 0.0f;
      own_video[static_cast<size_t>(i * k * n + c * n + offset + i)] = 1.0f;
    }
  const float minus_inf = -std::numeric_limits<float>::infinity();
  Tensor positives = masked_fill(video_to_text, from_vector(not_positive, {b, n * k}), minus_inf);
  Tensor negatives = masked_fill(text_to_video, from_vector(own_video, {b, k * n}), minus_inf);
  Tensor numerator = logsumexp(positives, 1);
  Tensor denominator = logsumexp(cat({video_to_text, negatives}, 1), 1);
  return mean(sub(denominator, numerator));
}

RetrievalMetrics text_to_video_retrieval(const Tensor& text, const Tensor& video) {
  TESSERA_CHECK(text.dim() == 2 && video.dim() == 2 && text.shape() == video.shape(),
                "[retrieval] expects text and video embeddings of one shape (N, D), got ", shape_str(text.shape()),
                " and ", shape_str(video.shape()));
  NoGradGuard no_grad;
  const int64_t n = text.shape()[0];
  const std::vector<float> scores = contiguous(matmul(text, transpose(video, 0, 1))).to_vector<float>();
  std::vector<int64_t> ranks;
  for (int64_t i = 0; i < n; ++i) {
    const float own = scores[static_cast<size_t>(i * n + i)];
    int64_t better = 0;  // videos scored above the right one (ties count against it)
    for (int64_t j = 0; j < n; ++j)
      if (j != i && scores[static_cast<size_t>(i * n + j)] >= own) ++better;
    ranks.push_back(better + 1);
  }
  RetrievalMetrics m;
  m.queries = n;
  if (n == 0) return m;
  auto recall = [&](int64_t k) {
    return static_cast<double>(std::count_if(ranks.begin(), ranks.end(), [k](int64_t r) { return r <= k; })) / n;
  };
  m.r1 = recall(1), m.r5 = recall(5), m.r10 = recall(10);
  std::sort(ranks.begin(), ranks.end());
  m.median_rank = n % 2 ? ranks[n / 2] : 0.5 * (ranks[n / 2 - 1] + ranks[n / 2]);
  return m;
}

}  // namespace tessera::nn
