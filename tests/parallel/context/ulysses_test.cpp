// Ulysses' head exchange (parallel/context/ulysses.h) on threads: the GPT with each sequence cut over
// N ranks gives each rank the logits of its tokens as one process computes them on the whole
// sequences, and the ranks' parameter gradients add up to the one process's.
#include <gtest/gtest.h>

#include "dist/collective_suite.h"
#include "parallel/tensor/tp_testing.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

class UlyssesGpt : public ::testing::TestWithParam<int> {};

TEST_P(UlyssesGpt, EachRanksTokensGetOneProcesssLogitsAndTheGradientsAddUp) {
  const int world = GetParam();
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
    model.spread_sequence(testing::borrow(g));
    const int64_t first = t * g.rank();
    Tensor mine = model.forward(contiguous(slice(ids, 1, first, first + t)));
    testing::expect_close(mine, contiguous(slice(logits, 1, first, first + t)), 1e-5f,
                          "rank " + std::to_string(g.rank()) + "'s logits");
    sum(mul(mine, contiguous(slice(weights, 1, first, first + t)))).backward();
    for (auto& [name, p] : model.named_parameters()) grads[g.rank()].emplace_back(name, p.grad().clone());
  });
  const auto named = whole.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    Tensor total = zeros(named[i].second.shape());
    for (int r = 0; r < world; ++r) add_(total, grads[r][i].second);
    testing::expect_close(total, named[i].second.grad(), 1e-4f, "gradient of " + named[i].first);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, UlyssesGpt, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace tessera
