// SyncBatchNorm on N ranks (threads over the threaded backend) against nn::BatchNorm on the
// concatenated global batch: outputs, input gradients, DDP-averaged weight/bias gradients and running
// statistics within 1e-5, for even, uneven and empty per-rank batches.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "parallel/threaded_group.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/sgd.h"
#include "tessera/parallel/ddp/distributed_data_parallel.h"
#include "tessera/parallel/sync_batch_norm.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using testing::borrow;
using testing::threaded;

constexpr int64_t kChannels = 3;

// |a - b| <= 1e-5 · max(1, |b|) elementwise.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<float> a = got.to_vector<float>(), b = want.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-5 * std::max(1.0f, std::fabs(b[i]))) << what << ", element " << i;
}

// Non-default affine parameters and running statistics, so every term of the update shows.
nn::StateDict initial_state() {
  Generator gen(21);
  return {{"weight", add(rand({kChannels}, gen), 0.5f)},
          {"bias", randn({kChannels}, gen)},
          {"running_mean", randn({kChannels}, gen)},
          {"running_var", add(rand({kChannels}, gen), 0.5f)},
          {"num_batches_tracked", from_vector(std::vector<int64_t>{4}, {})}};
}

Tensor rows(const Tensor& t, int64_t begin, int64_t end) { return t.slice(0, begin, end).contiguous(); }

struct Case {
  std::vector<int64_t> rows_per_rank;
  Shape sample;  // (C, ...) without the batch dim
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "rows per rank {";
  for (size_t i = 0; i < c.rows_per_rank.size(); ++i) *os << (i ? ", " : "") << c.rows_per_rank[i];
  *os << "}, sample " << shape_str(c.sample);
}

struct Outcome {
  Tensor y, dx, dweight, dbias, running_mean, running_var, y_eval;
  int64_t tracked = 0;
  bool eval_communicated = false;
};

class SyncBatchNormEqualsGlobalBatch : public ::testing::TestWithParam<Case> {};

TEST_P(SyncBatchNormEqualsGlobalBatch, ForwardBackwardAndRunningStats) {
  const Case& c = GetParam();
  const int world = static_cast<int>(c.rows_per_rank.size());
  const int64_t global = std::accumulate(c.rows_per_rank.begin(), c.rows_per_rank.end(), int64_t{0});
  Shape shape = {global};
  shape.insert(shape.end(), c.sample.begin(), c.sample.end());
  Generator gen(5);
  // Channel means of 1, -2 and 0.5 and std 1.5: statistics far from the initial running ones.
  Shape channel_shape(shape.size(), 1);
  channel_shape[1] = kChannels;
  Tensor x_all = add(mul(randn(shape, gen), 1.5f), from_vector(std::vector<float>{1, -2, 0.5f}, channel_shape));
  Tensor r_all = randn(shape, gen);  // the loss is Σ y · R, so dy = R

  // One process, the whole batch.
  std::shared_ptr<nn::BatchNorm> bn;
  if (c.sample.size() == 1) bn = std::make_shared<nn::BatchNorm1d>(kChannels);
  else bn = std::make_shared<nn::BatchNorm2d>(kChannels);
  bn->load_state_dict(initial_state());
  Tensor x_ref = x_all.clone().set_requires_grad(true);
  Tensor y_ref = (*bn)(x_ref);
  sum(mul(y_ref, r_all)).backward();
  bn->eval();
  Tensor y_eval_ref = (*bn)(x_all);

  std::vector<Outcome> out(world);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    const int64_t begin = std::accumulate(c.rows_per_rank.begin(), c.rows_per_rank.begin() + r, int64_t{0});
    const int64_t end = begin + c.rows_per_rank[r];
    parallel::SyncBatchNorm sync(kChannels, borrow(group));
    sync.load_state_dict(initial_state());  // the same names as nn::BatchNorm's
    Tensor x = rows(x_all, begin, end).set_requires_grad(true);
    Tensor y = sync(x);
    sum(mul(y, rows(r_all, begin, end))).backward();
    Outcome& o = out[r];
    o.y = y.detach();
    o.dx = x.grad();
    // DDP's reducer averages parameter gradients over the ranks.
    o.dweight = sync.weight.grad().clone();
    o.dbias = sync.bias.grad().clone();
    group.allreduce(o.dweight, dist::ReduceOp::Avg)->wait();
    group.allreduce(o.dbias, dist::ReduceOp::Avg)->wait();
    o.running_mean = sync.running_mean.clone();
    o.running_var = sync.running_var.clone();
    o.tracked = sync.num_batches_tracked.item<int64_t>();
    sync.eval();
    const uint64_t issued = group.sequence_number();
    o.y_eval = sync(rows(x_all, begin, end));
    o.eval_communicated = group.sequence_number() != issued;
  });

  std::vector<Tensor> ys, dxs, y_evals;
  for (auto& o : out) {
    ys.push_back(o.y);
    dxs.push_back(o.dx);
    y_evals.push_back(o.y_eval);
  }
  expect_close(cat(ys, 0), y_ref, "output");
  expect_close(cat(dxs, 0), x_ref.grad(), "input gradient");
  expect_close(cat(y_evals, 0), y_eval_ref, "evaluation output");
  for (int r = 0; r < world; ++r) {
    const std::string rank = " on rank " + std::to_string(r);
    expect_close(out[r].dweight, mul(bn->weight.grad(), 1.0f / world), "averaged weight gradient" + rank);
    expect_close(out[r].dbias, mul(bn->bias.grad(), 1.0f / world), "averaged bias gradient" + rank);
    expect_close(out[r].running_mean, bn->running_mean, "running_mean" + rank);
    expect_close(out[r].running_var, bn->running_var, "running_var" + rank);
    EXPECT_EQ(out[r].tracked, bn->num_batches_tracked.item<int64_t>()) << rank;
    EXPECT_FALSE(out[r].eval_communicated) << "evaluation must use the running statistics alone" << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, SyncBatchNormEqualsGlobalBatch,
    ::testing::Values(Case{{6}, {kChannels, 2, 3}}, Case{{4, 4}, {kChannels, 2, 3}}, Case{{3, 5}, {kChannels, 2, 3}},
                      Case{{3, 5, 2}, {kChannels, 2, 3}}, Case{{0, 4, 3}, {kChannels, 2, 3}},
                      Case{{3, 5}, {kChannels}}, Case{{2, 1, 4}, {kChannels}}),
    [](const auto& info) {
      std::string name = info.param.sample.size() == 1 ? "1d" : "2d";
      for (int64_t n : info.param.rows_per_rank) name.append("_").append(std::to_string(n));
      return name;
    });

TEST(SyncBatchNorm, TooFewValuesIsAnErrorOnEveryRank) {
  testing::expect_error<ValueError>(
      [] {
        testing::run_on_threads(2, threaded(2), [](dist::ProcessGroup& group) {
          parallel::SyncBatchNorm sync(kChannels, borrow(group));
          sync(zeros({group.rank() == 0 ? 1 : 0, kChannels}));
        });
      },
      {"[SyncBatchNorm]", "more than one value per channel"});
}

TEST(SyncBatchNorm, RejectsWrongChannelsAndNullGroup) {
  testing::run_on_threads(1, threaded(1), [](dist::ProcessGroup& group) {
    parallel::SyncBatchNorm sync(kChannels, borrow(group));
    testing::expect_error<ValueError>([&] { sync(zeros({4, 2, 5})); }, {"[SyncBatchNorm]", "(N, 3, ...)", "[4, 2, 5]"});
  });
  testing::expect_error<ValueError>([] { parallel::SyncBatchNorm(kChannels, nullptr); }, {"[SyncBatchNorm]", "process group"});
}

// conv-BN-ReLU, then flatten-linear-BN1d-linear: both kinds of BatchNorm, one nested.
std::shared_ptr<nn::Sequential> make_bn_model() {
  auto head = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 4 * 4, 8),
      std::make_shared<nn::BatchNorm1d>(8, 1e-3f, 0.2f), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(2, 4, 3, nn::Conv2dConfig{.padding = 1}), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), head});
}

TEST(ConvertSyncBatchnorm, ReplacesEveryBatchNormKeepingTensorsAndNames) {
  testing::run_on_threads(1, threaded(1), [](dist::ProcessGroup& group) {
    auto model = make_bn_model();
    model->eval();
    nn::StateDict before = model->state_dict();
    auto converted = parallel::convert_sync_batchnorm(model, borrow(group));
    EXPECT_EQ(converted, model);
    EXPECT_EQ((*model)[1]->name(), "SyncBatchNorm");
    auto inner = std::dynamic_pointer_cast<parallel::SyncBatchNorm>((*std::static_pointer_cast<nn::Sequential>((*model)[3]))[2]);
    ASSERT_NE(inner, nullptr);
    EXPECT_FLOAT_EQ(inner->eps, 1e-3f);
    EXPECT_FLOAT_EQ(inner->momentum, 0.2f);
    EXPECT_FALSE(inner->is_training());
    nn::StateDict after = model->state_dict();
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_EQ(after[i].first, before[i].first);
      EXPECT_TRUE(after[i].second.shares_storage_with(before[i].second)) << after[i].first;
    }
    // A BatchNorm root becomes a new module.
    auto root = parallel::convert_sync_batchnorm(std::make_shared<nn::BatchNorm2d>(5), borrow(group));
    EXPECT_EQ(root->name(), "SyncBatchNorm");
  });
}

// A block calling its BatchNorm through a typed member, which replacing the child cannot reach.
class TypedMemberBlock : public nn::Module {
 public:
  TypedMemberBlock() { bn_ = register_module("bn", std::make_shared<nn::BatchNorm2d>(2)); }
  Tensor forward(const Tensor& x) override { return (*bn_)(x); }

 private:
  std::shared_ptr<nn::BatchNorm2d> bn_;
};

TEST(ConvertSyncBatchnorm, RefusesABatchNormHeldOutsideChildren) {
  testing::run_on_threads(1, threaded(1), [](dist::ProcessGroup& group) {
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::BatchNorm2d>(2), std::make_shared<TypedMemberBlock>()});
    testing::expect_error<ValueError>([&] { parallel::convert_sync_batchnorm(model, borrow(group)); },
                                      {"[convert_sync_batchnorm]", "'1.bn'", "typed member"});
    EXPECT_EQ((*model)[0]->name(), "BatchNorm2d") << "an error must leave the model unchanged";
  });
}

TEST(ConvertSyncBatchnorm, DdpTrainingEqualsSingleProcessOnTheGlobalBatch) {
  // 2 ranks × 4 samples with SGD for 3 steps against one process on the 8 samples: with
  // unsynchronised BatchNorm the ranks would normalise with 4-sample statistics and differ.
  constexpr int kWorld = 2, kSteps = 3;
  constexpr int64_t kPerRank = 4;
  Generator gen(9);
  Tensor x = randn({kSteps, kWorld * kPerRank, 2, 4, 4}, gen);
  Tensor y = randint(0, 3, {kSteps, kWorld * kPerRank}, gen);
  auto step_rows = [](const Tensor& t, int64_t s, int64_t b, int64_t e) { return t.slice(0, s, s + 1).squeeze(0).slice(0, b, e).contiguous(); };
  optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9};

  manual_seed(3);
  auto single = make_bn_model();
  optim::SGD opt(single->parameters(), sgd);
  for (int64_t s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    cross_entropy((*single)(step_rows(x, s, 0, kWorld * kPerRank)), step_rows(y, s, 0, kWorld * kPerRank)).backward();
    opt.step();
  }

  std::vector<std::shared_ptr<nn::Sequential>> replicas;
  for (int r = 0; r < kWorld; ++r) {
    manual_seed(3);
    replicas.push_back(make_bn_model());
  }
  testing::run_on_threads(kWorld, threaded(kWorld), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    auto model = parallel::convert_sync_batchnorm(replicas[r], borrow(group));
    parallel::ddp::DistributedDataParallel ddp(model, borrow(group));
    optim::SGD local(model->parameters(), sgd);
    for (int64_t s = 0; s < kSteps; ++s) {
      local.zero_grad();
      const int64_t b = r * kPerRank;
      cross_entropy(ddp(step_rows(x, s, b, b + kPerRank)), step_rows(y, s, b, b + kPerRank)).backward();
      local.step();
    }
  });
  nn::StateDict want = single->state_dict();
  for (int r = 0; r < kWorld; ++r) {
    nn::StateDict got = replicas[r]->state_dict();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i].second.dtype() == DType::Int64) {
        EXPECT_EQ(got[i].second.item<int64_t>(), want[i].second.item<int64_t>()) << got[i].first;
        continue;
      }
      expect_close(got[i].second, want[i].second, got[i].first + " on rank " + std::to_string(r));
    }
  }
}


}  // namespace
}  // namespace tessera
