// MIL-NCE: the loss against its formula and finite differences, N ranks against one process on the
// global batch, and text->video retrieval metrics on known rankings.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/threaded_group.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/nn/milnce.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using testing::threaded;

Tensor rows_of(const Tensor& t, int64_t begin, int64_t end) { return contiguous(slice(t, 0, begin, end)).detach(); }

TEST(MilNce, LogSumExpIsStableAndExact) {
  Tensor x = from_vector(std::vector<float>{1000.0f, 1000.0f, -5.0f, 0.0f, 1.0f, 2.0f}, {2, 3});
  std::vector<float> v = nn::logsumexp(x, 1).to_vector<float>();
  EXPECT_NEAR(v[0], 1000.0 + std::log(2.0 + std::exp(-1005.0)), 1e-3);  // no overflow
  EXPECT_NEAR(v[1], std::log(1.0 + std::exp(1.0) + std::exp(2.0)), 1e-5);
  EXPECT_NEAR(nn::logsumexp(from_vector(std::vector<float>{0.0f, 1.0f, 2.0f}, {3}), 0).item<float>(),
              std::log(1.0f + std::exp(1.0f) + std::exp(2.0f)), 1e-5);
}

// The loss of one clip written out from the formula in milnce.h, in double.
double reference_loss(const std::vector<float>& v, const std::vector<float>& t, int64_t n, int64_t k, int64_t d, float tau) {
  auto dot = [&](int64_t i, int64_t j, int64_t c) {  // video i, clip j's candidate c
    double s = 0;
    for (int64_t e = 0; e < d; ++e) s += double(v[i * d + e]) * t[(j * k + c) * d + e];
    return s / tau;
  };
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double pos = 0, neg = 0;
    for (int64_t c = 0; c < k; ++c) pos += std::exp(dot(i, i, c));
    for (int64_t j = 0; j < n; ++j)
      if (j != i)
        for (int64_t c = 0; c < k; ++c) neg += std::exp(dot(i, j, c)) + std::exp(dot(j, i, c));
    total += -std::log(pos / (pos + neg));
  }
  return total / n;
}

TEST(MilNce, LossEqualsItsFormula) {
  Generator gen(3);
  const int64_t n = 5, k = 3, d = 4;
  Tensor v = randn({n, d}, gen), t = randn({n, k, d}, gen);
  const float loss = nn::mil_nce_loss(v, t, 0.5f).item<float>();
  EXPECT_NEAR(loss, reference_loss(v.to_vector<float>(), t.to_vector<float>(), n, k, d, 0.5f), 1e-4);
}

TEST(MilNce, FiniteDifferences) {
  Generator gen(4);
  auto result = autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return nn::mil_nce_loss(nn::l2_normalize(in[0]), nn::l2_normalize(in[1]), 0.2f); },
      {randn({4, 3}, gen), randn({4, 2, 3}, gen)});
  EXPECT_TRUE(result.ok) << result.message;
}

void expect_close(const Tensor& a, const Tensor& b, float tolerance) {
  ASSERT_EQ(a.shape(), b.shape());
  testing::expect_near(a, contiguous(b).to_vector<float>(), tolerance);
}

nn::MilNceConfig small_transformer_text() {
  nn::MilNceConfig c;
  c.vocab = 7, c.embed_dim = 8, c.heads = 2, c.layers = 1, c.words = 4, c.text = "transformer";
  return c;
}

TEST(MilNce, TheTransformerTextBranchPassesFiniteDifferences) {
  manual_seed(3);
  nn::TransformerTextEncoder encoder(small_transformer_text());
  const Tensor ids = from_vector(std::vector<int64_t>{1, 2, 3, 0, 4, 5, 0, 0, 6, 6, 6, 6}, {3, 4});
  Generator gen(5);
  const Tensor probe = randn({3, 8}, gen);
  auto result = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        encoder.embed->wte->weight = in[0];
        encoder.embed->wpe->weight = in[1];
        encoder.proj->weight = in[2];
        return sum(mul(encoder(ids), probe));
      },
      {encoder.embed->wte->weight.detach(), encoder.embed->wpe->weight.detach(), encoder.proj->weight.detach()});
  EXPECT_TRUE(result.ok) << result.message;
}

TEST(MilNce, TheTransformerTextBranchIgnoresPaddingAndTakesKCandidates) {
  manual_seed(4);
  nn::TransformerTextEncoder encoder(small_transformer_text());
  NoGradGuard no_grad;
  // Padding comes after the words: [1, 2, 3, 0] is [1, 2, 3] (the attention is causal, the mean skips it).
  const Tensor padded = encoder(from_vector(std::vector<int64_t>{1, 2, 3, 0}, {1, 4}));
  const Tensor bare = encoder(from_vector(std::vector<int64_t>{1, 2, 3}, {1, 3}));
  expect_close(padded, bare, 1e-6);
  const Tensor k = encoder(from_vector(std::vector<int64_t>{1, 2, 3, 0, 4, 5, 0, 0}, {1, 2, 4}));
  EXPECT_EQ(k.shape(), (Shape{1, 2, 8}));
  expect_close(contiguous(slice(k, 1, 0, 1)).reshape({1, 8}), padded, 1e-6);
  EXPECT_THROW(encoder(from_vector(std::vector<int64_t>{1, 2, 3, 4, 5}, {1, 5})), ValueError);  // longer than words
}

TEST(MilNce, ThePackedModelSplitsItsInputIntoClipsAndNarrations) {
  nn::MilNceConfig c;
  c.feature_dim = 3, c.vocab = 9, c.hidden = 5, c.embed_dim = 4, c.frames = 2, c.candidates = 2, c.words = 3;
  manual_seed(6);
  nn::MilNceModel model(c);
  Generator gen(7);
  const Tensor clips = randn({5, 2, 3}, gen);
  const Tensor words = from_vector(std::vector<int64_t>{1, 2, 0, 3, 4, 5, 6, 7, 8, 1, 0, 0, 2, 2, 2, 3, 3, 0, 4, 0, 0,
                                                         5, 6, 7, 8, 8, 8, 1, 2, 3},
                                   {5, 2, 3});
  NoGradGuard no_grad;
  const Tensor out = model(nn::pack_clip_text(clips, words));
  ASSERT_EQ(out.shape(), (Shape{5, 3, 4}));
  expect_close(contiguous(slice(out, 1, 0, 1)).reshape({5, 4}), (*model.video)(clips), 1e-6);
  expect_close(contiguous(slice(out, 1, 1, 3)), (*model.text)(words), 1e-6);
  // The loss of the packed output is mil_nce_loss of its parts; hits count in-batch R@1.
  EXPECT_NEAR(nn::mil_nce_loss_of(out, 0.1f).item<float>(),
              nn::mil_nce_loss((*model.video)(clips), (*model.text)(words), 0.1f).item<float>(), 1e-6);
  const int64_t hits = nn::in_batch_hits(out, 0.1f);
  EXPECT_GE(hits, 0);
  EXPECT_LE(hits, 5);
  EXPECT_THROW(model(randn({5, 7}, gen)), ValueError);
}

class MilNceRanks : public ::testing::TestWithParam<int> {};

// Each rank's loss over its clips with negatives gathered from every rank: the mean of the ranks'
// losses is one process's loss on the whole batch, and each rank's input gradients are `world` times
// one process's rows (DDP's average over ranks divides them back).
TEST_P(MilNceRanks, EqualOneProcessOnTheGlobalBatch) {
  const int world = GetParam();
  const int64_t per_rank = 3, n = per_rank * world, k = 2, d = 4;
  Generator gen(8);
  const Tensor v_all = randn({n, d}, gen), t_all = randn({n, k, d}, gen);
  Tensor v1 = v_all.clone().set_requires_grad(true), t1 = t_all.clone().set_requires_grad(true);
  Tensor single = nn::mil_nce_loss(v1, t1, 0.3f);
  single.backward();
  std::vector<double> losses(world);
  std::vector<Tensor> gv(world), gt(world);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    Tensor v = rows_of(v_all, r * per_rank, (r + 1) * per_rank).set_requires_grad(true);
    Tensor t = rows_of(t_all, r * per_rank, (r + 1) * per_rank).set_requires_grad(true);
    Tensor loss = nn::mil_nce_loss(v, t, 0.3f, &group);
    loss.backward();
    losses[r] = loss.item<float>();
    gv[r] = v.grad(), gt[r] = t.grad();
  });
  double mean_loss = 0;
  for (int r = 0; r < world; ++r) {
    mean_loss += losses[r] / world;
    testing::expect_near(mul(gv[r], 1.0f / world), rows_of(v1.grad(), r * per_rank, (r + 1) * per_rank).to_vector<float>(), 1e-5f);
    testing::expect_near(mul(gt[r], 1.0f / world), rows_of(t1.grad(), r * per_rank, (r + 1) * per_rank).to_vector<float>(), 1e-5f);
  }
  EXPECT_NEAR(mean_loss, single.item<float>(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Worlds, MilNceRanks, ::testing::Values(1, 2, 4));

TEST(MilNce, RetrievalMetricsOnKnownRankings) {
  // Orthonormal videos; query i points at video i, except query 3 which points at video 0 first,
  // then at video 3.
  std::vector<float> video(16, 0.0f), text(16, 0.0f);
  for (int i = 0; i < 4; ++i) video[i * 4 + i] = 1.0f;
  for (int i = 0; i < 3; ++i) text[i * 4 + i] = 1.0f;
  text[3 * 4 + 0] = 0.9f, text[3 * 4 + 3] = 0.5f;
  nn::RetrievalMetrics m = nn::text_to_video_retrieval(from_vector(text, {4, 4}), from_vector(video, {4, 4}));
  EXPECT_EQ(m.queries, 4);
  EXPECT_DOUBLE_EQ(m.r1, 0.75);
  EXPECT_DOUBLE_EQ(m.r5, 1.0);
  EXPECT_DOUBLE_EQ(m.median_rank, 1.0);
  EXPECT_THROW(nn::text_to_video_retrieval(from_vector(text, {4, 4}), from_vector(video, {2, 8})), ValueError);
}

TEST(MilNce, BadShapesAreRefused) {
  EXPECT_THROW(nn::mil_nce_loss(zeros({2, 3}), zeros({3, 2, 3}), 0.1f), ValueError);
  EXPECT_THROW(nn::mil_nce_loss(zeros({2, 3}), zeros({2, 2, 3}), 0.0f), ValueError);
  nn::VideoEncoder video({.feature_dim = 8});
  EXPECT_THROW(video(zeros({2, 3, 5})), ValueError);
}

}  // namespace
}  // namespace tessera
