// ColumnParallelLinear and RowParallelLinear against the full Linear they were cut from: outputs,
// input gradients and weight-shard gradients, at world sizes 1-3 with uneven splits (7 features).
#include <gtest/gtest.h>

#include "parallel/tensor/tp_testing.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/tensor/column_parallel_linear.h"
#include "tessera/parallel/tensor/mappings.h"
#include "tessera/parallel/tensor/row_parallel_linear.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using namespace parallel::tensor;
using testing::borrow;
using testing::expect_close;
using testing::expect_shard_grads;
using testing::threaded;

constexpr float kTol = 1e-5f;

// The full layer's output, input gradient and parameter gradients for L = Σ(linear(x)·R).
struct Reference {
  Tensor x, y, weights;
};
Reference run_full(nn::Linear& full, const Shape& x_shape, uint64_t seed) {
  Generator gen(seed);
  Reference ref;
  ref.x = randn(x_shape, gen).set_requires_grad(true);
  ref.y = full.forward(ref.x);
  ref.weights = randn(ref.y.shape(), gen);
  sum(mul(ref.y, ref.weights)).backward();
  return ref;
}

class TensorParallelLinear : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelLinear, ColumnGatheredEqualsFull) {
  const int world = GetParam();
  manual_seed(10);
  nn::Linear full(5, 7);
  Reference ref = run_full(full, {2, 3, 5}, 11);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    ColumnParallelLinear layer(full, borrow(g), {.gather_output = true});
    Tensor x = ref.x.detach().clone().set_requires_grad(true);
    Tensor y = layer.forward(x);
    expect_close(y, ref.y, kTol, "output");
    sum(mul(y, ref.weights)).backward();  // the loss is replicated: every rank computes all of it
    expect_close(x.grad(), ref.x.grad(), kTol, "input grad");
    expect_shard_grads(layer, full, g.rank(), world, kTol);
  });
}

TEST_P(TensorParallelLinear, ColumnLocalIsTheOutputSlice) {
  const int world = GetParam();
  manual_seed(12);
  nn::Linear full(5, 7);
  Reference ref = run_full(full, {4, 5}, 13);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    ColumnParallelLinear layer(full, borrow(g), {.gather_output = false});
    auto [begin, end] = shard_range(7, g.rank(), world);
    Tensor x = ref.x.detach().clone().set_requires_grad(true);
    Tensor y = layer.forward(x);
    expect_close(y, contiguous(ref.y.detach().slice(1, begin, end)), kTol, "local output");
    // Each rank's part of the loss; copy_to's backward adds the parts' input gradients.
    sum(mul(y, contiguous(ref.weights.slice(1, begin, end)))).backward();
    expect_close(x.grad(), ref.x.grad(), kTol, "input grad");
    expect_shard_grads(layer, full, g.rank(), world, kTol);
  });
}

TEST_P(TensorParallelLinear, RowWithParallelInputEqualsFull) {
  const int world = GetParam();
  manual_seed(14);
  nn::Linear full(7, 4);
  Reference ref = run_full(full, {2, 3, 7}, 15);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    RowParallelLinear layer(full, borrow(g), {.input_is_parallel = true});
    auto [begin, end] = shard_range(7, g.rank(), world);
    Tensor x = contiguous(ref.x.detach().slice(2, begin, end)).set_requires_grad(true);
    Tensor y = layer.forward(x);
    expect_close(y, ref.y, kTol, "output");
    sum(mul(y, ref.weights)).backward();
    expect_close(x.grad(), contiguous(ref.x.grad().slice(2, begin, end)), kTol, "input slice grad");
    expect_shard_grads(layer, full, g.rank(), world, kTol);
  });
}

TEST_P(TensorParallelLinear, RowScatteringTheInputEqualsFull) {
  const int world = GetParam();
  manual_seed(16);
  nn::Linear full(7, 4);
  Reference ref = run_full(full, {3, 7}, 17);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    RowParallelLinear layer(full, borrow(g), {.input_is_parallel = false});
    Tensor x = ref.x.detach().clone().set_requires_grad(true);
    Tensor y = layer.forward(x);
    expect_close(y, ref.y, kTol, "output");
    sum(mul(y, ref.weights)).backward();
    expect_close(x.grad(), ref.x.grad(), kTol, "input grad");
    expect_shard_grads(layer, full, g.rank(), world, kTol);
  });
}

TEST_P(TensorParallelLinear, ColumnThenRowWithoutBias) {
  const int world = GetParam();
  manual_seed(18);
  nn::Linear first(6, 9, false), second(9, 6, false);
  Generator gen(19);
  Tensor x_full = randn({5, 6}, gen).set_requires_grad(true);
  Tensor y_full = second.forward(tanh(first.forward(x_full)));
  Tensor weights = randn(y_full.shape(), gen);
  sum(mul(y_full, weights)).backward();
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& g) {
    ColumnParallelLinear a(first, borrow(g), {.gather_output = false});
    RowParallelLinear b(second, borrow(g));
    EXPECT_FALSE(a.bias.defined());
    Tensor x = x_full.detach().clone().set_requires_grad(true);
    Tensor y = b.forward(tanh(a.forward(x)));
    expect_close(y, y_full, kTol, "output");
    sum(mul(y, weights)).backward();
    expect_close(x.grad(), x_full.grad(), kTol, "input grad");
    expect_shard_grads(a, first, g.rank(), world, kTol);
    expect_shard_grads(b, second, g.rank(), world, kTol);
  });
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, TensorParallelLinear, ::testing::Values(1, 2, 3));

TEST(TensorParallelLinearErrors, WrongShapesNameTheLayer) {
  manual_seed(20);
  nn::Linear full(7, 4);
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& g) {
    ColumnParallelLinear column(full, borrow(g));
    testing::expect_error<ValueError>([&] { column.forward(zeros({2, 5})); },
                                      {"[ColumnParallelLinear]", "(..., 7)", "[2, 5]"});
    RowParallelLinear row(full, borrow(g));
    // Rank 0 holds input features [0, 3), rank 1 [3, 7).
    testing::expect_error<ValueError>([&] { row.forward(zeros({2, 7})); },
                                      {"[RowParallelLinear]", g.rank() == 0 ? "(..., 3)" : "(..., 4)"});
    testing::expect_error<ValueError>([&] { ColumnParallelLinear(full, borrow(g), {.gather_output = false, .blocks = 3}); },
                                      {"[ColumnParallelLinear]", "4 output features", "3 equal blocks"});
  });
}

}  // namespace
}  // namespace tessera
