// VocabParallelEmbedding and vocab_parallel_cross_entropy against the full embedding and
// cross_entropy on gathered logits, with uneven vocabulary shards (13 and 97 over 2 and 3 ranks).
#include <gtest/gtest.h>

#include "parallel/tensor/tp_testing.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/tensor/mappings.h"
#include "tessera/parallel/tensor/vocab_parallel_cross_entropy.h"
#include "tessera/parallel/tensor/vocab_parallel_embedding.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using namespace parallel::tensor;
using testing::borrow;
using testing::expect_close;
using testing::expect_shard_grads;
using testing::threaded;

class TensorParallelVocab : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelVocab, EmbeddingEqualsFull) {
  const int world = GetParam();
  manual_seed(40);
  nn::Embedding full(13, 4);
  Generator gen(41);
  Tensor ids = randint(0, 13, {3, 5}, gen);
  Tensor y_full = full.forward(ids);
  Tensor weights = randn(y_full.shape(), gen);
  sum(mul(y_full, weights)).backward();
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    VocabParallelEmbedding layer(full, borrow(g));
    auto [begin, end] = shard_range(13, g.rank(), world);
    EXPECT_EQ(layer.vocab_begin, begin);
    EXPECT_EQ(layer.vocab_end, end);
    Tensor y = layer.forward(ids);
    expect_close(y, y_full, 1e-6f, "output");
    sum(mul(y, weights)).backward();
    expect_shard_grads(layer, full, g.rank(), world, 1e-5f);
  });
}

// Logits (N, V) scaled large so that an unstable log-sum-exp would overflow.
void check_cross_entropy(int world, int64_t vocab, float scale) {
  Generator gen(42 + vocab);
  const int64_t N = 6;
  Tensor logits_full = mul(randn({N, vocab}, gen), scale).set_requires_grad(true);
  Tensor targets = randint(0, vocab, {N}, gen);
  Tensor loss_full = cross_entropy(logits_full, targets);
  loss_full.backward();
  const float want = loss_full.item<float>();
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    auto [begin, end] = shard_range(vocab, g.rank(), world);
    Tensor local = contiguous(logits_full.detach().slice(1, begin, end)).set_requires_grad(true);
    Tensor loss = vocab_parallel_cross_entropy(local, targets, borrow(g));
    EXPECT_NEAR(loss.item<float>(), want, 1e-5f * std::max(1.0f, std::fabs(want))) << "vocab " << vocab;
    mul(loss, 2.0f).backward();  // a non-unit upstream gradient
    expect_close(local.grad(), mul(contiguous(logits_full.grad().slice(1, begin, end)), 2.0f), 1e-5f,
                 "logit grad, vocab " + std::to_string(vocab));
  });
}

TEST_P(TensorParallelVocab, CrossEntropyEqualsGatheredCrossEntropy) {
  check_cross_entropy(GetParam(), 13, 1.0f);
  check_cross_entropy(GetParam(), 97, 1.0f);
}

TEST_P(TensorParallelVocab, CrossEntropyIsStableForLargeLogits) { check_cross_entropy(GetParam(), 97, 100.0f); }

INSTANTIATE_TEST_SUITE_P(TensorParallel, TensorParallelVocab, ::testing::Values(1, 2, 3));

TEST(TensorParallelVocabGradcheck, CrossEntropyAtOneRank) {
  testing::run_on_threads(1, threaded(1), [](dist::ProcessGroup& g) {
    auto group = borrow(g);
    Generator gen(43);
    Tensor targets = from_vector(std::vector<int64_t>{0, 4, 2}, {3});
    auto f = [&](const std::vector<Tensor>& in) { return vocab_parallel_cross_entropy(in[0], targets, group); };
    auto r = autograd::gradcheck(f, {randn({3, 5}, gen)});
    EXPECT_TRUE(r.ok) << r.message;
  });
}

TEST(TensorParallelVocabErrors, BadInputsNameTheOp) {
  manual_seed(44);
  nn::Embedding full(5, 2);
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    auto group = borrow(g);
    Tensor logits = zeros({3, g.rank() == 0 ? 2 : 3});  // vocabulary 5
    testing::expect_error<ValueError>(
        [&] { vocab_parallel_cross_entropy(logits, from_vector(std::vector<float>{0, 1, 2}, {3}), group); },
        {"[vocab_parallel_cross_entropy]", "int64 targets (3)"});
    testing::expect_error<ValueError>([&] { vocab_parallel_cross_entropy(zeros({3}), arange(3), group); },
                                      {"[vocab_parallel_cross_entropy]", "(N, V_local)"});
    testing::expect_error<ValueError>(
        [&] { vocab_parallel_cross_entropy(logits, from_vector(std::vector<int64_t>{0, 5, 1}, {3}), group); },
        {"[vocab_parallel_cross_entropy]", "target 5", "[0, 5)"});
    VocabParallelEmbedding layer(full, group);
    testing::expect_error<ValueError>([&] { layer.forward(from_vector(std::vector<int64_t>{7}, {1})); },
                                      {"[VocabParallelEmbedding]", "id 7", "[0, 5)"});
  });
}

}  // namespace
}  // namespace tessera
