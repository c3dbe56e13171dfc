// all_reduce_sum as a differentiable op: forward and backward are both all-reduce sums.
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

}  // namespace
}  // namespace tessera
