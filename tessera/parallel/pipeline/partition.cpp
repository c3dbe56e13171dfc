#include "tessera/parallel/pipeline/partition.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::pipeline {

std::vector<int64_t> balance_stages(const std::vector<double>& costs, int stages) {
  const int64_t n = static_cast<int64_t>(costs.size());
  TESSERA_CHECK(stages >= 1, "[pipeline] needs at least one stage, got ", stages);
  TESSERA_CHECK(n >= stages, "[pipeline] cannot cut ", n, " layers into ", stages,
                " stages: every stage needs at least one layer (use fewer stages or a deeper model)");
  std::vector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    TESSERA_CHECK(costs[i] >= 0, "[pipeline] layer ", i, " has a negative cost ", costs[i]);
    prefix[i + 1] = prefix[i] + costs[i];
  }
  // best[s][i]: the smallest largest-stage cost of putting layers [0, i) into s stages.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int64_t>> cut(stages + 1, std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0.0;
  for (int s = 1; s <= stages; ++s)
    for (int64_t i = s; i <= n; ++i)
      for (int64_t j = s - 1; j < i; ++j) {
        double c = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (c < best[s][i]) best[s][i] = c, cut[s][i] = j;
      }
  std::vector<int64_t> bounds(stages + 1);
  bounds[stages] = n;
  for (int s = stages; s >= 1; --s) bounds[s - 1] = cut[s][bounds[s]];
  return bounds;
}

std::vector<nn::LayerChain> stage_chunks(const nn::LayerChain& chain, const std::vector<int64_t>& bounds, int stage,
                                         int stages, ChunkOrder order) {
  const int64_t runs = static_cast<int64_t>(bounds.size()) - 1;
  TESSERA_CHECK(stages >= 1 && stage >= 0 && stage < stages && runs >= stages && runs % stages == 0,
                "[pipeline] ", runs, " runs of layers do not split evenly over ", stages, " stages (stage ", stage, ")");
  const int per_stage = static_cast<int>(runs / stages);
  TESSERA_CHECK(order == ChunkOrder::Looped || per_stage == 2, "[pipeline] a V lays out 2 runs of layers per stage, got ",
                runs, " runs for ", stages, " stages");
  std::vector<nn::LayerChain> chunks;
  for (int c = 0; c < per_stage; ++c) {
    const auto run = static_cast<size_t>(virtual_stage(order, stage, stages, c));
    chunks.emplace_back(chain.begin() + bounds[run], chain.begin() + bounds[run + 1]);
  }
  return chunks;
}

std::vector<double> parameter_costs(const nn::LayerChain& chain) {
  std::vector<double> costs;
  for (const auto& layer : chain) costs.push_back(static_cast<double>(std::max<int64_t>(1, layer.module->num_parameters())));
  return costs;
}

std::vector<double> measured_costs(const nn::LayerChain& chain, const Tensor& sample, int repeats) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> costs(chain.size(), std::numeric_limits<double>::infinity());
  for (int r = 0; r < std::max(1, repeats) + 1; ++r) {  // the first pass warms caches and the allocator
    Tensor x = sample;
    for (size_t i = 0; i < chain.size(); ++i) {
      Tensor in = x.detach();
      if (in.dtype() == DType::Float32) in.set_requires_grad(true);
      auto t0 = Clock::now();
      Tensor out = chain[i].module->forward(in);
      if (autograd::needs_grad({out})) out.backward(ones_like(out));
      double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (r > 0) costs[i] = std::min(costs[i], seconds);
      x = out.detach();
    }
  }
  for (const auto& layer : chain) layer.module->zero_grad();
  return costs;
}

std::string describe_stages(const std::vector<int64_t>& bounds) {
  std::string out;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    if (s) out += " | ";
    out += std::to_string(bounds[s]) + "-" + std::to_string(bounds[s + 1] - 1);
  }
  return out;
}

}  // namespace tessera::parallel::pipeline
