// scaled_dot_product_attention's weights in one pass each way (ops/nn_ops.cpp), against the ops they
// replace. Its gradients are checked against finite differences in gradcheck_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "tessera/ops/ops.h"

namespace tessera {
namespace {

// Attention's weights are one pass each way (ops/nn_ops.cpp): the same bits, forward and backward,
// as the four ops they replace (scale, causal mask, masked_fill, softmax), with and without the
// mask, for a query block at the end of a longer key cache, and rows long enough to vectorise.
TEST(Attention, IsBitForBitTheScaleMaskAndSoftmaxItFuses) {
  Generator g(9);
  struct Case {
    int64_t tq, tk;
    bool causal;
  };
  // Last: more queries than keys, so the first rows see nothing (NaN, as softmax gives a row of -inf),
  // and a score of inf in one row (libm's path).
  for (const Case c : {Case{7, 7, true}, Case{3, 40, true}, Case{40, 40, true}, Case{5, 9, false}, Case{6, 4, true}}) {
    Tensor q = randn({2, 3, c.tq, 8}, g), k = randn({2, 3, c.tk, 8}, g), v = randn({2, 3, c.tk, 8}, g);
    if (c.tq > c.tk) q.data<float>()[5 * 8] = std::numeric_limits<float>::infinity();
    Tensor upstream = randn({2, 3, c.tq, 8}, g);
    auto grads_of = [&](const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& attention) {
      std::vector<Tensor> leaves{q.detach(), k.detach(), v.detach()};
      for (auto& t : leaves) t.set_requires_grad(true);
      Tensor y = attention(leaves[0], leaves[1], leaves[2]);
      sum(mul(y, upstream)).backward();
      return std::vector<std::vector<float>>{y.to_vector<float>(), leaves[0].grad().to_vector<float>(),
                                             leaves[1].grad().to_vector<float>(), leaves[2].grad().to_vector<float>()};
    };
    auto fused = grads_of([&](const Tensor& a, const Tensor& b, const Tensor& w) {
      return scaled_dot_product_attention(a, b, w, c.causal);
    });
    auto composed = grads_of([&](const Tensor& a, const Tensor& b, const Tensor& w) {
      Tensor scores = mul(matmul(a, transpose(b, -2, -1)), 1.0f / std::sqrt(8.0f));
      if (c.causal) {
        Tensor mask = zeros({c.tq, c.tk});
        for (int64_t i = 0; i < c.tq; ++i)
          for (int64_t j = 0; j < c.tk; ++j) mask.data<float>()[i * c.tk + j] = j > i + (c.tk - c.tq) ? 1.0f : 0.0f;
        scores = masked_fill(scores, mask, -std::numeric_limits<float>::infinity());
      }
      return matmul(softmax(scores, -1), w);
    });
    for (size_t i = 0; i < fused.size(); ++i) {  // the bits: -0 is not +0, and NaN equals NaN
      ASSERT_EQ(fused[i].size(), composed[i].size());
      EXPECT_EQ(std::memcmp(fused[i].data(), composed[i].data(), fused[i].size() * sizeof(float)), 0)
          << "Tq " << c.tq << " Tk " << c.tk << (c.causal ? " causal" : "") << ", output " << i;
    }
  }
}

}  // namespace
}  // namespace tessera
