// ParallelMLP, ParallelCausalSelfAttention and ParallelTransformerBlock against the full layers they
// were cut from: outputs, input gradients and every parameter's gradient (shards for split ones).
#include <gtest/gtest.h>

#include "parallel/tensor/tp_testing.h"
#include "tessera/nn/transformer.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/tensor/parallel_transformer_block.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using namespace parallel::tensor;
using testing::borrow;
using testing::expect_close;
using testing::expect_shard_grads;
using testing::threaded;

constexpr float kTol = 1e-5f;
constexpr int64_t kEmbed = 12, kHeads = 6;  // heads split over 1, 2 and 3 ranks

// Runs `full` on x (B, T, C) with L = Σ(full(x)·R), then each rank's tensor-parallel layer made by
// `make` on the same x and R, comparing output, input gradient and parameter gradients.
template <typename Full, typename Make>
void check_against_full(int world, Full& full, Make make, uint64_t seed) {
  Generator gen(seed);
  Tensor x_full = randn({2, 5, kEmbed}, gen).set_requires_grad(true);
  Tensor y_full = full.forward(x_full);
  Tensor weights = randn(y_full.shape(), gen);
  sum(mul(y_full, weights)).backward();
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    auto layer = make(borrow(g));
    Tensor x = x_full.detach().clone().set_requires_grad(true);
    Tensor y = layer->forward(x);
    expect_close(y, y_full, kTol, "output");
    sum(mul(y, weights)).backward();
    expect_close(x.grad(), x_full.grad(), kTol, "input grad");
    expect_shard_grads(*layer, full, g.rank(), world, kTol);
  });
}

class TensorParallelLayers : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelLayers, MlpEqualsFull) {
  manual_seed(30);
  nn::TransformerBlock block(kEmbed, kHeads);
  nn::Sequential& mlp = *block.mlp;
  check_against_full(GetParam(), mlp, [&](dist::ProcessGroupPtr g) {
    return std::make_shared<ParallelMLP>(mlp, g);
  }, 31);
}

TEST_P(TensorParallelLayers, AttentionSplitByHeadsEqualsFull) {
  manual_seed(32);
  nn::CausalSelfAttention attn(kEmbed, kHeads);
  check_against_full(GetParam(), attn, [&](dist::ProcessGroupPtr g) {
    auto layer = std::make_shared<ParallelCausalSelfAttention>(attn, g);
    EXPECT_EQ(layer->local_heads, kHeads / g->size());
    return layer;
  }, 33);
}

TEST_P(TensorParallelLayers, BlockEqualsFull) {
  manual_seed(34);
  nn::TransformerBlock block(kEmbed, kHeads);
  check_against_full(GetParam(), block, [&](dist::ProcessGroupPtr g) {
    auto layer = std::make_shared<ParallelTransformerBlock>(block, g);
    // The full block's names, each holding this rank's shard.
    auto full_params = block.named_parameters(), params = layer->named_parameters();
    EXPECT_EQ(params.size(), full_params.size());
    for (size_t i = 0; i < std::min(params.size(), full_params.size()); ++i)
      EXPECT_EQ(params[i].first, full_params[i].first);
    return layer;
  }, 35);
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, TensorParallelLayers, ::testing::Values(1, 2, 3));

TEST(TensorParallelLayersErrors, HeadsNotDivisibleNameTheLayer) {
  manual_seed(36);
  nn::CausalSelfAttention attn(8, 4);
  testing::run_on_threads(3, threaded(3), [&](dist::ProcessGroup& g) {
    testing::expect_error<ValueError>([&] { ParallelCausalSelfAttention(attn, borrow(g)); },
                                      {"[ParallelCausalSelfAttention]", "4 heads", "3 ranks"});
  });
}

TEST(TensorParallelLayersErrors, MlpOfAnotherShapeIsRejected) {
  nn::Sequential not_mlp{std::make_shared<nn::GELU>()};
  testing::run_on_threads(1, threaded(1), [&](dist::ProcessGroup& g) {
    testing::expect_error<ValueError>([&] { ParallelMLP(not_mlp, borrow(g)); }, {"[ParallelMLP]", "1 layers"});
  });
}

TEST(TensorParallelLayersErrors, AttentionInputShapeIsChecked) {
  manual_seed(37);
  nn::CausalSelfAttention attn(8, 4);
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    ParallelCausalSelfAttention layer(attn, borrow(g));
    testing::expect_error<ValueError>([&] { layer.forward(zeros({2, 3, 6})); },
                                      {"[ParallelCausalSelfAttention]", "(B, T, 8)", "[2, 3, 6]"});
  });
}

}  // namespace
}  // namespace tessera
