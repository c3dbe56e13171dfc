// TensorParallelCharTransformer against the single-process CharTransformer it was cut from: the
// logits, ten Adam steps (loss per step and the final full_state_dict), checkpoints both ways, the
// layer chain and its errors.
#include <gtest/gtest.h>

#include "parallel/tensor/tp_testing.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/parallel/tensor/mappings.h"
#include "tessera/parallel/tensor/tensor_parallel_char_transformer.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using namespace parallel::tensor;
using testing::borrow;
using testing::expect_close;
using testing::small_config;
using testing::threaded;

std::unique_ptr<nn::CharTransformer> make_full(uint64_t seed) {
  manual_seed(seed);
  return std::make_unique<nn::CharTransformer>(small_config());
}

Tensor full_loss(nn::CharTransformer& model, const Tensor& ids, const Tensor& targets) {
  Tensor logits = model.forward(ids);
  return cross_entropy(reshape(logits, {-1, logits.shape().back()}), reshape(targets, {-1}));
}

void expect_state_equal(const nn::StateDict& got, const nn::StateDict& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    expect_close(got[i].second, want[i].second, tol, got[i].first);
  }
}

class TensorParallelCharTransformerRanks : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelCharTransformerRanks, TrainsLikeTheFullModel) {
  const int world = GetParam();
  constexpr int kSteps = 10;
  // The key bias's true gradient is zero (softmax ignores a shift of every score of a query), so its
  // float gradient is rounding noise, which Adam with eps = 1e-8 turns into steps of ±lr in any
  // direction; eps = 1e-3 keeps such noise from moving the weights, and the real gradients still do.
  const optim::AdamOptions adam{.lr = 1e-2, .eps = 1e-3};
  Generator gen(50);
  std::vector<Tensor> ids, targets;
  for (int s = 0; s < kSteps; ++s) {
    ids.push_back(randint(0, 13, {2, 8}, gen));
    targets.push_back(randint(0, 13, {2, 8}, gen));
  }
  auto reference = make_full(51);
  auto start = make_full(51);  // the same initial weights, for the ranks to cut
  std::vector<float> want_losses;
  {
    optim::Adam opt(reference->parameters(), adam);
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      Tensor loss = full_loss(*reference, ids[s], targets[s]);
      loss.backward();
      opt.step();
      want_losses.push_back(loss.item<float>());
    }
  }
  const nn::StateDict want_state = reference->state_dict();
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    TensorParallelCharTransformer model(*start, borrow(g));
    optim::Adam opt(model.parameters(), adam);
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      Tensor loss = model.loss(ids[s], targets[s]);
      loss.backward();
      opt.step();
      EXPECT_NEAR(loss.item<float>(), want_losses[s], 1e-4f * want_losses[s]) << "step " << s << " rank " << g.rank();
    }
    expect_state_equal(model.full_state_dict(), want_state, 1e-4f);
  });
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, TensorParallelCharTransformerRanks, ::testing::Values(1, 2));

TEST(TensorParallelCharTransformer, LogitsAndNamesMatchTheFullModel) {
  auto full = make_full(52);
  Generator gen(53);
  Tensor ids = randint(0, 13, {2, 6}, gen);
  Tensor want = full->forward(ids).detach();
  const nn::StateDict full_state = full->state_dict();
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    TensorParallelCharTransformer model(*full, borrow(g));
    auto [begin, end] = shard_range(13, g.rank(), 2);
    EXPECT_EQ(model.vocab_begin(), begin);
    EXPECT_EQ(model.vocab_end(), end);
    expect_close(model.forward(ids), contiguous(want.slice(2, begin, end)), 1e-5f, "local logits");
    expect_close(model.full_logits(ids), want, 1e-5f, "full logits");
    // Same names, in the same order, as the full model's state_dict; full shapes once gathered.
    nn::StateDict mine = model.state_dict();
    ASSERT_EQ(mine.size(), full_state.size());
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i].first, full_state[i].first);
    expect_state_equal(model.full_state_dict(), full_state, 0);
  });
}

TEST(TensorParallelCharTransformer, FullStateDictRoundTrips) {
  auto full = make_full(54);
  auto other = make_full(55);  // different values, loaded into the parallel model
  const nn::StateDict other_state = other->state_dict();
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    TensorParallelCharTransformer model(*full, borrow(g));
    model.load_full_state_dict(other_state);
    expect_state_equal(model.full_state_dict(), other_state, 0);
    nn::StateDict missing(other_state.begin() + 1, other_state.end());
    testing::expect_error<ValueError>([&] { model.load_full_state_dict(missing); },
                                      {"[load_full_state_dict]", "missing key 'wte.weight'"});
    nn::StateDict wrong = other_state;
    wrong[0].second = zeros({12, 16});
    testing::expect_error<ValueError>([&] { model.load_full_state_dict(wrong); },
                                      {"[load_full_state_dict]", "'wte.weight'", "[12, 16]", "[13, 16]"});
  });
}

TEST(TensorParallelCharTransformer, LayerChainComposesToForward) {
  auto full = make_full(56);
  Generator gen(57);
  Tensor ids = randint(0, 13, {1, 8}, gen);
  nn::LayerChain full_chain = full->layer_chain();
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    TensorParallelCharTransformer model(*full, borrow(g));
    nn::LayerChain chain = model.layer_chain();
    ASSERT_EQ(chain.size(), full_chain.size());
    Tensor x = ids;
    for (size_t i = 0; i < chain.size(); ++i) {
      EXPECT_EQ(chain[i].prefix, full_chain[i].prefix);
      x = chain[i].module->forward(x);
    }
    expect_close(x, model.forward(ids), 0, "chained logits");
    // The head's parameters carry the full model's names under its prefix.
    EXPECT_EQ(chain.back().module->named_parameters().back().first, "lm_head.weight");
  });
}

TEST(TensorParallelCharTransformer, GeneratesTheSameTokensOnEveryRank) {
  auto full = make_full(58);
  Generator reference_gen(59);
  const std::vector<int64_t> want = full->generate({1, 2, 3}, 6, 1.0f, 0, reference_gen);
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    TensorParallelCharTransformer model(*full, borrow(g));
    Generator gen(59);
    EXPECT_EQ(model.generate({1, 2, 3}, 6, 1.0f, 0, gen), want);
  });
}

TEST(TensorParallelCharTransformer, BadInputsNameTheOp) {
  auto full = make_full(60);
  testing::run_on_threads(3, threaded(3), [&](dist::ProcessGroup& g) {
    testing::expect_error<ValueError>([&] { TensorParallelCharTransformer(*full, borrow(g)); },
                                      {"[ParallelCausalSelfAttention]", "4 heads", "3 ranks"});
  });
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    TensorParallelCharTransformer model(*full, borrow(g));
    testing::expect_error<ValueError>([&] { model.loss(zeros({2, 4}, DType::Int64), zeros({2, 3}, DType::Int64)); },
                                      {"[TensorParallelCharTransformer]", "targets", "[2, 4]", "[2, 3]"});
    testing::expect_error<ValueError>([&] { model.forward(zeros({2, 9}, DType::Int64)); },
                                      {"[TensorParallelCharTransformer]", "9", "context 8"});
  });
}

}  // namespace
}  // namespace tessera
