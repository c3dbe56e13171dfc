// Sequence parallelism: the token scatter, all_gather_linear and linear_reduce_scatter against one
// process's Linear (forward and every gradient) at world sizes 1-3, with chunk counts that do and do
// not divide the rows; a finite-difference check of each at tp = 1; the dropout mask; the summed
// partial gradients; the tensor-parallel GPT with sequence parallelism training like the full model.
#include <gtest/gtest.h>

#include "parallel/tensor/tp_testing.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/parallel/tensor/sequence_parallel.h"
#include "tessera/parallel/tensor/tensor_parallel_char_transformer.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using namespace parallel::tensor;
using testing::borrow;
using testing::expect_close;
using testing::small_config;
using testing::threaded;

// Rank r's tokens of (B, T, C): [T·r/world, T·(r+1)/world) of dimension 1.
Tensor tokens_of(const Tensor& whole, int rank, int world) {
  const int64_t local = whole.shape()[1] / world;
  return contiguous(whole.slice(1, rank * local, (rank + 1) * local));
}

struct Case {
  int world;
  int64_t chunks;
};

class SequenceParallelOps : public ::testing::TestWithParam<Case> {};

// y = all_gather_linear(x_r, W_r, b_r) against Y = X·Wᵀ + b, each rank's output columns; the loss
// Σ_r Σ(y_r·G_r) gives dX = G·W (each rank its tokens), dW_r = G_rᵀ·X, db_r = Σ G_r.
TEST_P(SequenceParallelOps, AllGatherLinearIsTheLinearOfTheWholeSequence) {
  const auto [world, chunks] = GetParam();
  constexpr int64_t B = 2, local = 3, C = 5, N = 6;
  const int64_t T = local * world;
  Generator gen(11);
  Tensor X = randn({B, T, C}, gen), W = randn({N * world, C}, gen), b = randn({N * world}, gen);
  Tensor G = randn({B, T, N * world}, gen);
  Tensor Xl = X.clone().set_requires_grad(true), Wl = W.clone().set_requires_grad(true), bl = b.clone().set_requires_grad(true);
  Tensor Y = linear(Xl, Wl, bl);
  sum(mul(Y, G)).backward();
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    const int r = g.rank();
    Tensor x = tokens_of(X, r, world).set_requires_grad(true);
    Tensor w = contiguous(W.slice(0, r * N, (r + 1) * N)).set_requires_grad(true);
    Tensor bias = contiguous(b.slice(0, r * N, (r + 1) * N)).set_requires_grad(true);
    Tensor y = all_gather_linear(x, w, bias, borrow(g), chunks);
    expect_close(y, contiguous(Y.detach().slice(2, r * N, (r + 1) * N)), 1e-5f, "forward");
    sum(mul(y, contiguous(G.slice(2, r * N, (r + 1) * N)))).backward();
    expect_close(x.grad(), tokens_of(Xl.grad(), r, world), 1e-4f, "input gradient");
    expect_close(w.grad(), contiguous(Wl.grad().slice(0, r * N, (r + 1) * N)), 1e-4f, "weight gradient");
    expect_close(bias.grad(), contiguous(bl.grad().slice(0, r * N, (r + 1) * N)), 1e-4f, "bias gradient");
  });
}

// y_r = linear_reduce_scatter(X_r, W_r), X_r and W_r this rank's input features, against rank r's
// tokens of X·Wᵀ; the loss Σ_r Σ(y_r·G_r) gives dX_r = (G·W) of its features, dW_r = Gᵀ·X_r.
TEST_P(SequenceParallelOps, LinearReduceScatterIsTheLinearOfTheWholeSequence) {
  const auto [world, chunks] = GetParam();
  constexpr int64_t B = 2, local = 3, K = 4, C = 5;
  const int64_t T = local * world;
  Generator gen(12);
  Tensor X = randn({B, T, K * world}, gen), W = randn({C, K * world}, gen), G = randn({B, T, C}, gen);
  Tensor Xl = X.clone().set_requires_grad(true), Wl = W.clone().set_requires_grad(true);
  Tensor Y = linear(Xl, Wl, Tensor());
  sum(mul(Y, G)).backward();
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    const int r = g.rank();
    Tensor x = contiguous(X.slice(2, r * K, (r + 1) * K)).set_requires_grad(true);
    Tensor w = contiguous(W.slice(1, r * K, (r + 1) * K)).set_requires_grad(true);
    Tensor y = linear_reduce_scatter(x, w, borrow(g), chunks);
    expect_close(y, tokens_of(Y.detach(), r, world), 1e-5f, "forward");
    sum(mul(y, tokens_of(G, r, world))).backward();
    expect_close(x.grad(), contiguous(Xl.grad().slice(2, r * K, (r + 1) * K)), 1e-4f, "input gradient");
    expect_close(w.grad(), contiguous(Wl.grad().slice(1, r * K, (r + 1) * K)), 1e-4f, "weight gradient");
  });
}

// The scatter keeps this rank's tokens; its backward gathers every rank's token gradients, so the
// input's gradient is the whole G on every rank.
TEST_P(SequenceParallelOps, ScatterKeepsTheTokensAndGathersTheirGradients) {
  const int world = GetParam().world;
  Generator gen(13);
  Tensor X = randn({2, 2 * world, 3}, gen), G = randn({2, 2 * world, 3}, gen);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    Tensor x = X.clone().set_requires_grad(true);
    Tensor mine = scatter_to_sequence_parallel_region(x, borrow(g));
    expect_close(mine, tokens_of(X, g.rank(), world), 0, "forward");
    sum(mul(mine, tokens_of(G, g.rank(), world))).backward();
    expect_close(x.grad(), G, 0, "backward");
  });
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, SequenceParallelOps,
                         ::testing::Values(Case{1, 1}, Case{2, 1}, Case{2, 4}, Case{3, 2}, Case{3, 100}));

TEST(SequenceParallelOps, FiniteDifferencesAgreeAtOneRank) {
  testing::run_on_threads(1, threaded(1), [](dist::ProcessGroup& g) {
    auto group = borrow(g);
    Generator gen(14);
    auto gathered = [&](const std::vector<Tensor>& in) { return tanh(all_gather_linear(in[0], in[1], in[2], group, 2)); };
    auto r = autograd::gradcheck(gathered, {randn({2, 3, 4}, gen), randn({5, 4}, gen), randn({5}, gen)});
    EXPECT_TRUE(r.ok) << "all_gather_linear: " << r.message;
    auto scattered = [&](const std::vector<Tensor>& in) { return tanh(linear_reduce_scatter(in[0], in[1], group, 2)); };
    r = autograd::gradcheck(scattered, {randn({2, 3, 4}, gen), randn({5, 4}, gen)});
    EXPECT_TRUE(r.ok) << "linear_reduce_scatter: " << r.message;
    auto scatter = [&](const std::vector<Tensor>& in) { return tanh(scatter_to_sequence_parallel_region(in[0], group)); };
    r = autograd::gradcheck(scatter, {randn({2, 3, 4}, gen)});
    EXPECT_TRUE(r.ok) << "scatter_to_sequence_parallel_region: " << r.message;
  });
}

// Under mixed precision's bfloat16 wire the same ops send half the bytes and stay within bfloat16's
// rounding of the float32 result, forward and backward.
TEST(SequenceParallelOps, ABfloat16WireHalvesTheBytes) {
  constexpr int64_t B = 2, local = 3, C = 8, N = 4;
  Generator gen(15);
  Tensor X = randn({B, 2 * local, C}, gen), W = randn({2 * N, C}, gen);
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    const int r = g.rank();
    Tensor w = contiguous(W.slice(0, r * N, (r + 1) * N));
    Tensor want_y, want_dx;
    int64_t want_bytes = 0;
    for (DType wire : {DType::Float32, DType::BFloat16}) {
      TensorParallelWire on(wire);
      TensorParallelCommTally tally;
      TensorParallelCommTallyScope scope(&tally);
      Tensor x = tokens_of(X, r, 2).set_requires_grad(true);
      Tensor y = linear_reduce_scatter(all_gather_linear(x, w, Tensor(), borrow(g), 2), transpose(w, 0, 1).contiguous(),
                                       borrow(g), 2);
      sum(mul(y, tokens_of(X, r, 2))).backward();
      if (wire == DType::Float32) {
        want_y = y.detach(), want_dx = x.grad(), want_bytes = tally.bytes;
        continue;
      }
      expect_close(y, want_y, 3e-2f, "bf16 forward");
      expect_close(x.grad(), want_dx, 3e-2f, "bf16 input gradient");
      EXPECT_EQ(2 * tally.bytes, want_bytes);
    }
  });
}

// Every rank draws the whole tensor's mask and keeps its tokens' part: together the ranks apply the
// mask one process would, and the ranks' parts differ.
TEST(SequenceParallelOps, DropoutUsesTheWholeTensorsMask) {
  manual_seed(21);
  const Tensor whole = dropout(ones({2, 4, 8}), 0.5f, true);
  std::vector<Tensor> parts;
  for (int r = 0; r < 2; ++r) {
    manual_seed(21);
    testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
      if (g.rank() != r) return;  // ranks seeded alike; one draws, as threads share the process's generator
      parts.push_back(sequence_parallel_dropout(ones({2, 2, 8}), 0.5f, true, borrow(g)));
    });
  }
  ASSERT_EQ(parts.size(), 2u);
  expect_close(parts[0], tokens_of(whole, 0, 2), 0, "rank 0's mask");
  expect_close(parts[1], tokens_of(whole, 1, 2), 0, "rank 1's mask");
  EXPECT_NE(parts[0].to_vector<float>(), parts[1].to_vector<float>());
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    Tensor x = ones({2, 2, 8});
    EXPECT_EQ(sequence_parallel_dropout(x, 0.5f, false, borrow(g)).impl(), x.impl());  // evaluation: the identity
  });
}

TEST(SequenceParallelOps, PartialGradientsAddUpOverTheGroup) {
  testing::run_on_threads(3, threaded(3), [](dist::ProcessGroup& g) {
    Tensor a = zeros({2}).set_requires_grad(true), b = zeros({3}).set_requires_grad(true);
    a.set_grad(full({2}, static_cast<float>(g.rank() + 1)));  // b has none: it counts as zeros
    sum_partial_gradients({a, b}, g);
    expect_close(a.grad(), full({2}, 6.0f), 0, "a");
    expect_close(b.grad(), zeros({3}), 0, "b");
  });
}

TEST(SequenceParallelOps, ErrorsNameTheOpAndTheSizes) {
  testing::run_on_threads(2, threaded(2), [](dist::ProcessGroup& g) {
    auto group = borrow(g);
    testing::expect_error<ValueError>([&] { scatter_to_sequence_parallel_region(zeros({1, 5, 3}), group); },
                                      {"[scatter_to_sequence_parallel_region]", "5 tokens", "2 ranks", "model.context"});
    testing::expect_error<ValueError>([&] { linear_reduce_scatter(zeros({1, 3, 4}), zeros({2, 4}), group, 1); },
                                      {"[linear_reduce_scatter]", "3 tokens"});
    testing::expect_error<ValueError>([&] { all_gather_linear(zeros({2, 4}), zeros({2, 4}), Tensor(), group, 1); },
                                      {"[all_gather_linear]", "(B, T, C)", "[2, 4]"});
    testing::expect_error<ValueError>([&] { all_gather_linear(zeros({1, 2, 4}), zeros({2, 3}), Tensor(), group, 1); },
                                      {"[all_gather_linear]", "weight [2, 3]", "4 features"});
  });
}

class SequenceParallelGpt : public ::testing::TestWithParam<Case> {};

// Ten Adam steps of the sequence-parallel GPT, partial gradients summed after each backward, give the
// full model's losses and final weights.
TEST_P(SequenceParallelGpt, TrainsLikeTheFullModel) {
  const auto [world, chunks] = GetParam();
  constexpr int kSteps = 10;
  const optim::AdamOptions adam{.lr = 1e-2, .eps = 1e-3};  // eps: as TensorParallelCharTransformerRanks
  Generator gen(60);
  std::vector<Tensor> ids, targets;
  for (int s = 0; s < kSteps; ++s) {
    ids.push_back(randint(0, 13, {2, 8}, gen));
    targets.push_back(randint(0, 13, {2, 8}, gen));
  }
  manual_seed(61);
  nn::CharTransformer reference(small_config());
  manual_seed(61);
  nn::CharTransformer start(small_config());
  std::vector<float> want_losses;
  {
    optim::Adam opt(reference.parameters(), adam);
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      Tensor logits = reference.forward(ids[s]);
      Tensor loss = cross_entropy(reshape(logits, {-1, 13}), reshape(targets[s], {-1}));
      loss.backward();
      opt.step();
      want_losses.push_back(loss.item<float>());
    }
  }
  const nn::StateDict want = reference.state_dict();
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    TensorParallelCharTransformer model(start, borrow(g), SequenceParallel{true, chunks});
    EXPECT_EQ(model.token_parameters().size(), 2u * 6 + 2);  // per block ln_1, ln_2 (2 each), 2 biases; ln_f
    EXPECT_TRUE(TensorParallelCharTransformer(start, borrow(g)).token_parameters().empty());  // none without it
    optim::Adam opt(model.parameters(), adam);
    TensorParallelCommTally tally;
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      TensorParallelCommTallyScope scope(&tally);
      Tensor loss = model.loss(ids[s], targets[s]);
      loss.backward();
      sum_partial_gradients(model.token_parameters(), g);
      opt.step();
      EXPECT_NEAR(loss.item<float>(), want_losses[s], 1e-4f * want_losses[s]) << "step " << s << " rank " << g.rank();
    }
    // Per step and direction: qkv, fc and lm_head gather, the two projections reduce-scatter, in K
    // chunks each; the backward gathers the inputs of qkv, fc and lm_head again, the embedding's
    // scatter gathers its gradient once, and the vocabulary-parallel embedding all-reduces once.
    const int64_t K = std::min<int64_t>(chunks, 2 * 8 / world);
    EXPECT_EQ(tally.calls, kSteps * ((2 * (2 * 4 + 1) + 2 * 2 + 1) * K + 2));
    const nn::StateDict got = model.full_state_dict();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) expect_close(got[i].second, want[i].second, 1e-4f, got[i].first);
  });
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, SequenceParallelGpt,
                         ::testing::Values(Case{2, 1}, Case{2, 3}, Case{4, 2}));

}  // namespace
}  // namespace tessera
