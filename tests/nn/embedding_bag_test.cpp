// EmbeddingBag: the mean of rows by hand, its gradient by finite differences, sparse mode (rows from a
// source, as a parameter-server worker pulls them) against local mode, and the errors.
#include <gtest/gtest.h>

#include "tessera/autograd/gradcheck.h"
#include "tessera/nn/embedding_bag.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

using namespace tessera;
using tessera::testing::expect_error;
using tessera::testing::expect_near;

namespace {

// Row r of the (5, 2) weight is (r, 10 r + 1): the means are easy to write down.
nn::EmbeddingBag hand_bag() {
  nn::EmbeddingBag bag(5, 2);
  NoGradGuard no_grad;
  copy_(bag.weight, from_vector(std::vector<float>{0, 1, 1, 11, 2, 21, 3, 31, 4, 41}, {5, 2}));
  return bag;
}

Tensor ids(const std::vector<int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

// A source that serves rows from a (server-side) copy of the weight, recording what it was asked for.
nn::EmbeddingBag::RowSource serve_from(const Tensor& table, std::vector<std::vector<int64_t>>* requests) {
  return [table, requests](const std::vector<int64_t>& wanted) {
    if (requests) requests->push_back(wanted);
    return index_select(table, 0, from_vector(wanted, {static_cast<int64_t>(wanted.size())}));
  };
}

}  // namespace

TEST(EmbeddingBag, ForwardIsTheMeanOfEachBagsRows) {
  nn::EmbeddingBag bag = hand_bag();
  Tensor out = bag(ids({0, 1, 1, 3, 3, 0}, {2, 3}));
  EXPECT_EQ(out.shape(), (Shape{2, 2}));
  // Bag 0: rows 0, 1, 1 -> ((0+1+1)/3, (1+11+11)/3); bag 1: rows 3, 3, 0 -> (6/3, 63/3).
  expect_near(out, {2.0f / 3, 23.0f / 3, 2.0f, 21.0f});
  EXPECT_EQ(bag.last_ids(), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_FALSE(bag.sparse());
  EXPECT_FALSE(bag.last_rows().defined());
  EXPECT_EQ(bag.name(), "EmbeddingBag");
  EXPECT_EQ(bag.weight.shape(), (Shape{5, 2}));
  ASSERT_EQ(bag.named_parameters().size(), 1u);
  EXPECT_EQ(bag.named_parameters()[0].first, "weight");
}

TEST(EmbeddingBag, LocalGradientMatchesFiniteDifferences) {
  // Ids repeated within a bag and across bags, one row (5) never used: its gradient must be zero.
  nn::EmbeddingBag bag(6, 3);
  Tensor indices = ids({0, 2, 2, 4, 1, 3, 0, 0, 4, 4, 4, 2}, {3, 4});
  auto result = autograd::gradcheck([&](const std::vector<Tensor>&) { return bag(indices); }, {bag.weight});
  EXPECT_TRUE(result.ok) << result.message;
}

TEST(EmbeddingBag, SparseModeEqualsLocalModeOnTheTouchedRows) {
  manual_seed(3);
  const int64_t vocab = 50, dim = 4;
  nn::EmbeddingBag bag(vocab, dim);
  Generator gen(11);
  Tensor indices = randint(0, 20, {6, 5}, gen);  // rows 20..49 are never touched
  Tensor projection = randn({6, dim}, gen);

  Tensor local = bag(indices);
  sum(local * projection).backward();
  Tensor dense_grad = bag.weight.grad();
  const std::vector<int64_t> local_ids = bag.last_ids();

  std::vector<std::vector<int64_t>> requests;
  bag.set_row_source(serve_from(bag.weight.detach().clone(), &requests));
  bag.zero_grad();
  EXPECT_TRUE(bag.sparse());
  Tensor sparse = bag(indices);
  sum(sparse * projection).backward();

  expect_near(sparse, local.to_vector<float>());
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0], local_ids) << "the source gets the batch's sorted unique ids";
  EXPECT_EQ(bag.last_ids(), local_ids);
  EXPECT_TRUE(std::is_sorted(local_ids.begin(), local_ids.end()));
  EXPECT_EQ(std::adjacent_find(local_ids.begin(), local_ids.end()), local_ids.end());
  EXPECT_FALSE(bag.weight.grad().defined()) << "sparse mode does not read (or differentiate) the local weight";

  const Tensor& rows = bag.last_rows();
  ASSERT_TRUE(rows.defined());
  EXPECT_TRUE(rows.is_leaf());
  EXPECT_EQ(rows.shape(), (Shape{static_cast<int64_t>(local_ids.size()), dim}));
  ASSERT_TRUE(rows.grad().defined());
  // The sparse gradient is exactly the dense one's rows at last_ids(); the dense one is zero elsewhere.
  Tensor wanted = from_vector(local_ids, {static_cast<int64_t>(local_ids.size())});
  expect_near(rows.grad(), index_select(dense_grad, 0, wanted).to_vector<float>());
  std::vector<float> dense = dense_grad.to_vector<float>();
  for (int64_t r = 0; r < vocab; ++r) {
    if (std::binary_search(local_ids.begin(), local_ids.end(), r)) continue;
    for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(dense[r * dim + j], 0.0f) << "row " << r << " is not in the batch";
  }

  // An empty function returns to the local weight.
  bag.set_row_source(nullptr);
  EXPECT_FALSE(bag.sparse());
  expect_near(bag(indices), local.to_vector<float>());
  EXPECT_FALSE(bag.last_rows().defined());
}

TEST(EmbeddingBag, SparseModeInsideASequentialTrainsTheRows) {
  // The bow model's shape: EmbeddingBag -> Linear. The worker's view of one step: rows pulled, loss,
  // backward, and the rows' gradient is ready to push; the head's gradient is dense as usual.
  auto bag = std::make_shared<nn::EmbeddingBag>(1000, 8);
  auto head = std::make_shared<nn::Linear>(8, 3);
  nn::Sequential model{bag, head};
  Tensor table = bag->weight.detach().clone();
  bag->set_row_source(serve_from(table, nullptr));
  Tensor indices = ids({999, 5, 5, 7, 0, 999}, {2, 3});
  cross_entropy(model(indices), ids({2, 0}, {2})).backward();
  EXPECT_EQ(bag->last_ids(), (std::vector<int64_t>{0, 5, 7, 999}));
  ASSERT_TRUE(bag->last_rows().grad().defined());
  EXPECT_EQ(bag->last_rows().grad().shape(), (Shape{4, 8}));
  EXPECT_TRUE(head->weight.grad().defined());
  EXPECT_EQ(model.parameters().size(), 3u) << "the weight stays registered in sparse mode";
  {  // evaluation under NoGradGuard works in sparse mode too
    NoGradGuard no_grad;
    EXPECT_EQ(model(indices).shape(), (Shape{2, 3}));
  }
}

TEST(EmbeddingBag, BadInputsRaiseClearErrors) {
  nn::EmbeddingBag bag(10, 3);
  expect_error<ValueError>([&] { bag(from_vector(std::vector<float>{1, 2}, {1, 2})); }, {"[EmbeddingBag]", "int64", "float32"});
  expect_error<ValueError>([&] { bag(ids({1, 2, 3}, {3})); }, {"[EmbeddingBag]", "(batch, bag_length)", "[3]"});
  expect_error<ValueError>([&] { bag(ids({}, {2, 0})); }, {"[EmbeddingBag]", "empty"});
  expect_error<IndexError>([&] { bag(ids({1, 2, 10, 3}, {2, 2})); }, {"[EmbeddingBag]", "id 10", "indices[1, 0]", "[0, 10)"});
  expect_error<IndexError>([&] { bag(ids({-1, 2}, {1, 2})); }, {"id -1", "[0, 10)"});
  expect_error<ValueError>([] { nn::EmbeddingBag(0, 3); }, {"[EmbeddingBag]", "positive"});

  bag.set_row_source([](const std::vector<int64_t>& wanted) { return zeros({static_cast<int64_t>(wanted.size()), 4}); });
  expect_error<ValueError>([&] { bag(ids({1, 2, 2}, {1, 3})); }, {"[EmbeddingBag]", "row source", "[2, 3]", "[2, 4]"});
  bag.set_row_source([](const std::vector<int64_t>& wanted) {
    return zeros({static_cast<int64_t>(wanted.size()), 3}, DType::Int64);
  });
  expect_error<ValueError>([&] { bag(ids({1, 2, 2}, {1, 3})); }, {"row source", "float32", "int64"});
  bag.set_row_source([](const std::vector<int64_t>&) { return Tensor(); });
  expect_error<ValueError>([&] { bag(ids({1}, {1, 1})); }, {"row source", "undefined"});
}
