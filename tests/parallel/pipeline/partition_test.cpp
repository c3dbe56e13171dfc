// Cutting a chain of layers into balanced contiguous stages.
#include <gtest/gtest.h>

#include <numeric>

#include "tessera/nn/char_transformer.h"
#include "tessera/nn/layers.h"
#include "tessera/parallel/pipeline/partition.h"
#include "testing/expect.h"

namespace tessera::parallel::pipeline {
namespace {

// The largest stage cost of a cut, by brute force over every cut, for comparison.
double best_by_brute_force(const std::vector<double>& c, int stages) {
  const int n = static_cast<int>(c.size());
  double best = 1e300;
  std::vector<int> cut(stages - 1);
  std::function<void(int, int)> go = [&](int k, int from) {
    if (k == stages - 1) {
      double worst = 0;
      int start = 0;
      for (int s = 0; s < stages; ++s) {
        int end = s < stages - 1 ? cut[s] : n;
        worst = std::max(worst, std::accumulate(c.begin() + start, c.begin() + end, 0.0));
        start = end;
      }
      best = std::min(best, worst);
      return;
    }
    for (int i = from; i <= n - (stages - 1 - k); ++i) cut[k] = i, go(k + 1, i + 1);
  };
  go(0, 1);
  return best;
}

TEST(PipelinePartition, BalancedCutIsOptimal) {
  std::vector<std::vector<double>> cases{{1, 1, 1, 1}, {5, 1, 1, 1, 1, 1}, {1, 2, 3, 4, 5, 6, 7}, {10, 1, 1, 10}, {3, 0, 0, 3}};
  for (const auto& c : cases)
    for (int stages = 1; stages <= static_cast<int>(c.size()); ++stages) {
      auto b = balance_stages(c, stages);
      ASSERT_EQ(b.size(), static_cast<size_t>(stages + 1));
      EXPECT_EQ(b.front(), 0);
      EXPECT_EQ(b.back(), static_cast<int64_t>(c.size()));
      double worst = 0;
      for (int s = 0; s < stages; ++s) {
        EXPECT_LT(b[s], b[s + 1]) << "every stage gets a layer";
        worst = std::max(worst, std::accumulate(c.begin() + b[s], c.begin() + b[s + 1], 0.0));
      }
      EXPECT_DOUBLE_EQ(worst, best_by_brute_force(c, stages)) << describe_stages(b);
    }
}

TEST(PipelinePartition, TransformerByParametersPutsEmbeddingAndHeadApart) {
  nn::CharTransformerConfig c;
  c.vocab_size = 50;
  c.embed_dim = 16;
  c.heads = 2;
  c.layers = 4;
  c.context = 8;
  nn::CharTransformer model(c);
  auto chain = model.layer_chain();
  ASSERT_EQ(chain.size(), 6u);
  auto costs = parameter_costs(chain);
  int64_t total = 0;
  for (double x : costs) total += static_cast<int64_t>(x);
  EXPECT_EQ(total, model.num_parameters());
  auto b = balance_stages(costs, 2);
  EXPECT_EQ(b, (std::vector<int64_t>{0, 3, 6}));
}

TEST(PipelinePartition, MeasuredCostsArePositivePerLayer) {
  nn::Sequential mlp{std::make_shared<nn::Linear>(32, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 4)};
  Generator gen(1);
  auto costs = measured_costs(mlp.layer_chain(), randn({16, 32}, gen), 2);
  ASSERT_EQ(costs.size(), 3u);
  for (double c : costs) EXPECT_GT(c, 0.0);
  for (auto& p : mlp.parameters()) EXPECT_FALSE(p.grad().defined()) << "measuring leaves no gradients behind";
}

TEST(PipelinePartition, TooFewLayersIsAClearError) {
  testing::expect_error<ValueError>([] { balance_stages({1, 1}, 3); }, {"2 layers", "3 stages"});
}

}  // namespace
}  // namespace tessera::parallel::pipeline
