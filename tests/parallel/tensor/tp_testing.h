// Helpers for the tensor-parallel tests: compare a rank's tensors with the full single-process
// layer's (or their shards), relatively where values are large.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "parallel/threaded_group.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/tensor/sharding.h"

namespace tessera::testing {

// The small GPT the tensor-parallel tests cut: 13 vocabulary rows (6 + 7 over two ranks), context 8,
// width 16, 4 heads, 2 layers.
inline nn::CharTransformerConfig small_config() {
  nn::CharTransformerConfig c;
  c.vocab_size = 13;
  c.context = 8;
  c.embed_dim = 16;
  c.heads = 4;
  c.layers = 2;
  return c;
}

// |got - want| <= tol · max(1, |want|) elementwise, shapes equal.
inline void expect_close(const Tensor& got, const Tensor& want, float tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << " is undefined";
  ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape())) << what;
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    const float bound = tol * std::max(1.0f, std::fabs(w[i]));
    if (!(std::fabs(g[i] - w[i]) <= bound)) {
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << " vs " << w[i];
      return;
    }
  }
}

// Every parameter gradient of `tp` (a tensor-parallel module on rank `rank` of `world`) equals the
// full module's gradient of the same name, or this rank's shard of it.
inline void expect_shard_grads(const nn::Module& tp, const nn::Module& full, int rank, int world, float tol) {
  auto list = parallel::tensor::collect_shard_specs(tp);
  std::map<std::string, parallel::tensor::ShardSpec> specs(list.begin(), list.end());
  std::map<std::string, Tensor> full_params;
  for (const auto& [name, p] : full.named_parameters()) full_params[name] = p;
  for (const auto& [name, p] : tp.named_parameters()) {
    ASSERT_TRUE(full_params.count(name)) << "no full parameter named " << name;
    Tensor want = full_params[name].grad();
    auto spec = specs.find(name);
    if (spec != specs.end()) want = parallel::tensor::take_shard(want, spec->second, rank, world);
    expect_close(p.grad(), want, tol, "rank " + std::to_string(rank) + " of " + std::to_string(world) + ": grad of " + name);
  }
}

}  // namespace tessera::testing
