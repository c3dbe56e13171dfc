// all_reduce_sum as a differentiable op: forward and backward are both all-reduce sums; and
// all_gather_with_grad, whose backward reduce-scatters the gradient.
#include <gtest/gtest.h>

#include "parallel/threaded_group.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/functional.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using testing::borrow;
using testing::threaded;

TEST(AllReduceSum, GradcheckOnOneRank) {
  testing::run_on_threads(1, threaded(1), [](dist::ProcessGroup& group) {
    Generator gen(3);
    // tanh after the collective so the check sees a non-constant Jacobian flow through it.
    auto f = [&](const std::vector<Tensor>& in) { return tanh(mul(parallel::all_reduce_sum(in[0], group), in[1])); };
    auto r = autograd::gradcheck(f, {randn({3, 4}, gen), randn({3, 4}, gen)});
    EXPECT_TRUE(r.ok) << r.message;
  });
}

class AllReduceSumRanks : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceSumRanks, ForwardSumsAndBackwardSumsTheGradients) {
  const int world = GetParam();
  // Rank r holds x_r and weights its loss with R_r: L = Σ_r Σ(all_reduce_sum(x_r) · R_r), so
  // dL/dx_r = Σ_r' R_r' on every rank.
  std::vector<Tensor> xs, rs;
  Generator gen(11);
  for (int r = 0; r < world; ++r) {
    xs.push_back(randn({2, 3}, gen));
    rs.push_back(randn({2, 3}, gen));
  }
  Tensor x_sum = zeros({2, 3}), r_sum = zeros({2, 3});
  for (int r = 0; r < world; ++r) {
    add_(x_sum, xs[r]);
    add_(r_sum, rs[r]);
  }
  std::vector<Tensor> ys(world), grads(world);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    Tensor x = xs[r].clone().set_requires_grad(true);
    Tensor y = parallel::all_reduce_sum(x, group);
    sum(mul(y, rs[r])).backward();
    ys[r] = y.detach();
    grads[r] = x.grad();
    EXPECT_EQ(x.to_vector<float>(), xs[r].to_vector<float>()) << "the input must not change";
  });
  for (int r = 0; r < world; ++r) {
    testing::expect_near(ys[r], x_sum.to_vector<float>(), 1e-6f);
    testing::expect_near(grads[r], r_sum.to_vector<float>(), 1e-6f);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllReduceSumRanks, ::testing::Values(2, 3));

TEST(AllReduceSum, RejectsNonFloat) {
  testing::run_on_threads(1, threaded(1), [](dist::ProcessGroup& group) {
    testing::expect_error<ValueError>([&] { parallel::all_reduce_sum(arange(4), group); },
                                      {"[all_reduce_sum]", "int64", "rank 0"});
  });
}

// ---- all_gather_with_grad ----

// Rows [begin, end) of a 2-D tensor, as a new tensor.
Tensor rows_of(const Tensor& t, int64_t begin, int64_t end) { return clone(slice(t, 0, begin, end)); }

// An InfoNCE loss (CLIP's, MIL-NCE's without the bags) over the rows [offset, offset + n) of a global
// batch: each row of `a` against every row of `b_all`, its positive at its own global index.
Tensor info_nce(const Tensor& a, const Tensor& b_all, int64_t offset) {
  const int64_t n = a.shape()[0], total = b_all.shape()[0];
  std::vector<float> positive(static_cast<size_t>(n * total), 0.0f);
  for (int64_t i = 0; i < n; ++i) positive[static_cast<size_t>(i * total + offset + i)] = 1.0f;
  return neg(sum(mul(log_softmax(matmul(a, transpose(b_all, 0, 1)), 1), from_vector(positive, {n, total}))));
}

// Uneven rows per rank: rank r of W holds rows [r·N/W, (r+1)·N/W).
int64_t row_begin(int64_t n, int r, int world) { return n * r / world; }

class AllGatherWithGradRanks : public ::testing::TestWithParam<int> {};

// Every rank's loss over its own rows against the gathered batch: the sum of the ranks' losses and
// the gradients of every rank's rows equal one process's on the whole batch.
TEST_P(AllGatherWithGradRanks, ContrastiveLossAndGradientsEqualOneProcessOnTheGlobalBatch) {
  const int world = GetParam();
  const int64_t n = 7, d = 5;  // 7 rows over 2 or 3 ranks: uneven
  Generator gen(5);
  const Tensor a_all = randn({n, d}, gen), b_all = randn({n, d}, gen);
  Tensor a1 = a_all.clone().set_requires_grad(true), b1 = b_all.clone().set_requires_grad(true);
  Tensor single = info_nce(a1, b1, 0);
  single.backward();
  std::vector<double> losses(world);
  std::vector<Tensor> ga(world), gb(world), gathered(world);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    const int64_t begin = row_begin(n, r, world), end = row_begin(n, r + 1, world);
    Tensor a = rows_of(a_all, begin, end).set_requires_grad(true), b = rows_of(b_all, begin, end).set_requires_grad(true);
    Tensor b_gathered = parallel::all_gather_with_grad(b, group);
    Tensor loss = info_nce(a, b_gathered, begin);
    loss.backward();
    losses[r] = loss.item<float>();
    ga[r] = a.grad(), gb[r] = b.grad(), gathered[r] = b_gathered.detach();
  });
  double total = 0;
  for (int r = 0; r < world; ++r) {
    total += losses[r];
    testing::expect_near(gathered[r], b_all.to_vector<float>(), 0.0f);  // every rank holds the whole batch
    const int64_t begin = row_begin(n, r, world), end = row_begin(n, r + 1, world);
    testing::expect_near(ga[r], rows_of(a1.grad(), begin, end).to_vector<float>(), 1e-5f);
    testing::expect_near(gb[r], rows_of(b1.grad(), begin, end).to_vector<float>(), 1e-5f);
  }
  EXPECT_NEAR(total, single.item<float>(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllGatherWithGradRanks, ::testing::Values(1, 2, 3));

// Finite differences across ranks: every element of every rank's input, moved by ±h, changes the sum
// of the ranks' losses as the backward's gradient says.
TEST(AllGatherWithGrad, FiniteDifferencesOfTheSumOfTheRanksLosses) {
  const int world = 2;
  const int64_t n = 3, d = 2;
  Generator gen(9);
  const Tensor a_all = randn({n, d}, gen), b_all = randn({n, d}, gen);
  // The sum of the ranks' losses for the rows b (and a fixed), with the gradient of b on request.
  auto total_loss = [&](const Tensor& b_rows, Tensor* gradient) {
    std::vector<double> losses(world);
    std::vector<Tensor> grads(world);
    testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& group) {
      const int r = group.rank();
      const int64_t begin = row_begin(n, r, world), end = row_begin(n, r + 1, world);
      Tensor b = rows_of(b_rows, begin, end).set_requires_grad(true);
      Tensor loss = info_nce(rows_of(a_all, begin, end), tanh(parallel::all_gather_with_grad(b, group)), begin);
      loss.backward();
      losses[r] = loss.item<float>();
      grads[r] = b.grad();
    });
    if (gradient != nullptr) *gradient = cat(grads, 0);
    return losses[0] + losses[1];
  };
  Tensor analytic;
  total_loss(b_all, &analytic);
  const float h = 1e-2f;
  const std::vector<float> base = b_all.to_vector<float>(), g = analytic.to_vector<float>();
  for (size_t k = 0; k < base.size(); ++k) {
    std::vector<float> up = base, down = base;
    up[k] += h, down[k] -= h;
    const double numeric =
        (total_loss(from_vector(up, {n, d}), nullptr) - total_loss(from_vector(down, {n, d}), nullptr)) / (2 * h);
    EXPECT_NEAR(g[k], numeric, 2e-3) << "element " << k;
  }
}

TEST(AllGatherWithGrad, RowsOfAnotherShapeOnAnotherRankAreRefusedNamingBoth) {
  std::vector<std::string> messages(2);
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    try {
      parallel::all_gather_with_grad(zeros({2, r == 0 ? 4 : 5}), group);
    } catch (const ValueError& e) {
      messages[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(messages[r].find("[all_gather_with_grad] rank " + std::to_string(r)), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("rank " + std::to_string(1 - r) + "'s hold"), std::string::npos) << messages[r];
  }
  testing::run_on_threads(1, threaded(1), [](dist::ProcessGroup& group) {
    testing::expect_error<ValueError>([&] { parallel::all_gather_with_grad(arange(4), group); },
                                      {"[all_gather_with_grad]", "int64", "rank 0"});
  });
}

}  // namespace
}  // namespace tessera
