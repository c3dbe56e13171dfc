// Context parallelism on threads, by ring attention (parallel/context/ring_attention.h) and by
// Ulysses' head exchange (ulysses.h): the GPT with each sequence cut over N ranks gives each rank
// the logits of its tokens as one process computes them on the whole sequences, and the ranks'
// parameter gradients add up to the one process's.
#include <gtest/gtest.h>

#include "dist/collective_suite.h"
#include "parallel/tensor/tp_testing.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/parallel/context/layout.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

using parallel::context::ContextAttention;

class ContextParallelGpt : public ::testing::TestWithParam<std::tuple<int, ContextAttention>> {};

TEST_P(ContextParallelGpt, EachRanksTokensGetOneProcesssLogitsAndTheGradientsAddUp) {
  const auto [world, attention] = GetParam();
  nn::CharTransformerConfig config;
  config.vocab_size = 11;
  config.context = 16;
  config.embed_dim = 16;
  config.heads = 4;
  config.layers = 2;
  manual_seed(5);
  nn::CharTransformer whole(config);
  Generator gen(3);
  Tensor ids = randint(0, 11, {2, 16}, gen), weights = randn({2, 16, 11}, gen);
  Tensor logits = whole.forward(ids);
  sum(mul(logits, weights)).backward();
  std::vector<std::unique_ptr<nn::CharTransformer>> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<nn::CharTransformer>(config));
    ranks.back()->load_state_dict(whole.state_dict());
  }
  std::vector<nn::StateDict> grads(world);
  const int64_t t = 16 / world;
  testing::run_on_threads(world, testing::threaded(world), [&](dist::ProcessGroup& g) {
    nn::CharTransformer& model = *ranks[g.rank()];
    model.spread_sequence(testing::borrow(g), attention);
    const auto positions = parallel::context::context_positions(g.rank(), world, t, attention);
    Tensor columns = from_vector(positions, {t});
    std::vector<int64_t> all = ids.to_vector<int64_t>(), part;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t p : positions) part.push_back(all[b * 16 + p]);
    Tensor mine = model.forward(from_vector(part, {2, t}));
    testing::expect_close(mine, index_select(logits, 1, columns), 1e-5f, "rank " + std::to_string(g.rank()) + "'s logits");
    sum(mul(mine, index_select(weights, 1, columns))).backward();
    for (auto& [name, p] : model.named_parameters()) grads[g.rank()].emplace_back(name, p.grad().clone());
  });
  const auto named = whole.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    Tensor total = zeros(named[i].second.shape());
    for (int r = 0; r < world; ++r) add_(total, grads[r][i].second);
    testing::expect_close(total, named[i].second.grad(), 1e-4f, "gradient of " + named[i].first);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ContextParallelGpt,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(ContextAttention::Ring, ContextAttention::Ulysses)));

}  // namespace
}  // namespace tessera
