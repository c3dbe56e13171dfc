// Uneven inputs (DdpOptions::uneven_inputs + join()): ranks with different numbers of batches finish
// without a hang, and the result equals single-process training where iteration i's batch is the
// union of the batches of the ranks still active at i.
#include <gtest/gtest.h>

#include "parallel/ddp/ddp_testing.h"
#include "tessera/nn/models.h"
#include "tessera/optim/sgd.h"
#include "tessera/parallel/ddp/distributed_data_parallel.h"

namespace tessera {
namespace {

using parallel::ddp::DdpOptions;
using parallel::ddp::DistributedDataParallel;

constexpr int64_t kBatch = 4;  // per rank and iteration

// Rank r's j-th batch: rows [(r * 16 + j) * kBatch, ...) of x and y.
Tensor rows_of(const Tensor& t, int rank, int j) {
  int64_t begin = (rank * 16 + j) * kBatch;
  return t.slice(0, begin, begin + kBatch).contiguous();
}

optim::SGDOptions sgd() {
  optim::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  return o;
}

std::shared_ptr<nn::Module> make_model() { return nn::make_mlp({6, 16, 3}); }

TEST(DdpJoin, UnevenInputsEqualSingleProcessOnTheActiveRanksBatches) {
  const std::vector<int> batches = {2, 5, 3};  // per rank
  const int world = 3, most = 5;
  Generator gen(11);
  Tensor x = randn({world * 16 * kBatch, 6}, gen), y = randint(0, 3, {world * 16 * kBatch}, gen);

  manual_seed(5);
  auto single = make_model();
  {
    optim::SGD opt(single->parameters(), sgd());
    for (int j = 0; j < most; ++j) {
      std::vector<Tensor> xs, ys;
      for (int r = 0; r < world; ++r)
        if (j < batches[r]) xs.push_back(rows_of(x, r, j)), ys.push_back(rows_of(y, r, j));
      opt.zero_grad();
      cross_entropy((*single)(cat(xs, 0)), cat(ys, 0)).backward();
      opt.step();
    }
  }

  std::vector<std::shared_ptr<nn::Module>> replicas;
  for (int r = 0; r < world; ++r) {
    manual_seed(r == 0 ? 5 : 50 + r);
    replicas.push_back(make_model());
  }
  std::vector<int64_t> shadowed(world);
  testing::run_on_threads(world, testing::threaded(world), [&](dist::ProcessGroup& group) {
    int r = group.rank();
    DdpOptions options;
    options.uneven_inputs = true;
    options.first_bucket_cap_bytes = 256;  // several buckets
    options.bucket_cap_bytes = 256;
    DistributedDataParallel ddp(replicas[r], testing::borrow(group), options);
    optim::SGD opt(ddp.module().parameters(), sgd());
    for (int j = 0; j < batches[r]; ++j) {
      opt.zero_grad();
      cross_entropy(ddp(rows_of(x, r, j)), rows_of(y, r, j)).backward();
      opt.step();
    }
    shadowed[r] = ddp.join();
    EXPECT_EQ(ddp.iterations_with_data(), batches[r]);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(shadowed[r], most - batches[r]) << "rank " << r;
    EXPECT_LT(testing::max_parameter_difference(*single, *replicas[r]), 1e-5) << "rank " << r;
  }
}

TEST(DdpJoin, ARankWithNoDataAtAllAndNoSyncIterations) {
  // Rank 0 (which rebuilds the buckets for everyone) has no data; rank 1 accumulates two
  // micro-batches per step under no_sync. Both finish.
  manual_seed(1);
  std::vector<std::shared_ptr<nn::Module>> models = {make_model(), make_model()};  // not in the threads:
  // the default generator that initialises them is not thread-safe
  testing::run_on_threads(2, testing::threaded(2), [&](dist::ProcessGroup& group) {
    DdpOptions options;
    options.uneven_inputs = true;
    DistributedDataParallel ddp(models[group.rank()], testing::borrow(group), options);
    if (group.rank() == 1) {
      for (int step = 0; step < 3; ++step) {
        {
          auto guard = ddp.no_sync();
          sum(ddp(ones({2, 6}))).backward();
        }
        sum(ddp(ones({2, 6}))).backward();
      }
    }
    EXPECT_EQ(ddp.join(), group.rank() == 0 ? 6 : 0);
  });
}

TEST(DdpJoin, JoinWithoutUnevenInputsIsAnError) {
  std::vector<std::shared_ptr<nn::Module>> models = {make_model(), make_model()};
  testing::run_on_threads(2, testing::threaded(2), [&](dist::ProcessGroup& group) {
    DistributedDataParallel ddp(models[group.rank()], testing::borrow(group));
    EXPECT_THROW(ddp.join(), ValueError);
  });
}

}  // namespace
}  // namespace tessera
