// Cutting a chain of layers into pipeline stages.
//
// The cut minimises the largest stage's cost (the pipeline runs at the pace of its slowest stage),
// over contiguous runs of layers, each stage getting at least one layer. Costs are either parameter
// counts (free, and right when memory is what must be split) or measured forward+backward seconds
// per layer on a sample micro-batch (right when the layers' compute per parameter differs, as an
// embedding's does from a Transformer block's).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/nn/module.h"
#include "tessera/parallel/pipeline/schedule.h"

namespace tessera::parallel::pipeline {

// Stage boundaries: stage s owns layers [bounds[s], bounds[s+1]); bounds.size() == stages + 1.
std::vector<int64_t> balance_stages(const std::vector<double>& layer_costs, int stages);

// The chunks stage `stage` of `stages` holds when `bounds` cut the chain into stages·v runs, chunk c
// being run virtual_stage(order, stage, stages, c) (schedule.h): looped, runs stage, stages + stage,
// 2·stages + stage, ... (one run when v = 1; the interleaved schedule's virtual stages otherwise);
// in a V (ZB-V, v = 2), runs stage and 2·stages-1-stage.
std::vector<nn::LayerChain> stage_chunks(const nn::LayerChain& chain, const std::vector<int64_t>& bounds, int stage,
                                         int stages, ChunkOrder order = ChunkOrder::Looped);

// Parameter count of each layer (at least 1, so that parameterless layers still cost something).
std::vector<double> parameter_costs(const nn::LayerChain& chain);

// Seconds of forward plus backward of each layer on `sample` (the first layer's input), the best of
// `repeats` runs. The layers' gradients are left zeroed (set to none).
std::vector<double> measured_costs(const nn::LayerChain& chain, const Tensor& sample, int repeats = 3);

// "0-3 | 4-5": the layers each stage owns, for logs.
std::string describe_stages(const std::vector<int64_t>& bounds);

}  // namespace tessera::parallel::pipeline
