// ZeRO stage 3's parameter layout (parameter_layout.h): a rank keeps its chunk of each unit only.
// A unit is a run of the model's layers (each layer with parameters, or several by size:
// ZeroOptions::wrap_policy), gathered just before its forward and freed after it, gathered again
// just before its backward (the next unit's gather prefetched while this one computes), and freed
// once its gradients are sent. A model that is not a chain of layers is one unit.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/parallel/zero/parameter_layout.h"
#include "tessera/parallel/zero/zero_data_parallel.h"

namespace tessera::parallel::zero {

class ShardedParameters final : public ParameterLayout, public std::enable_shared_from_this<ShardedParameters> {
 public:
  ShardedParameters(ZeroUnits& units, const ZeroOptions& options)
      : units_(units), wrap_policy_(options.wrap_policy), min_unit_bytes_(options.min_unit_bytes),
        prefetch_(options.prefetch) {}

  std::vector<std::vector<size_t>> group_parameters(nn::Module& model, const ZeroUnits& units) override;
  // The units are in forward order; their gradients become ready last unit first.
  std::vector<size_t> gradient_order(size_t unit_count) const override;
  Tensor keep_chunk(const Tensor& chunk_of_full) const override;
  void start() override;
  Tensor forward(nn::Module& model, const Tensor& input) override;
  void after_gradients_sent(size_t unit) override { release(unit); }
  void after_backward() override { release_all(); }
  void publish() override;
  void gather_whole() override { gather_all(); }
  void release_whole() override { release_all(); }
  void before_whole_written() override;
  void after_whole_written() override;
  void hold_gathered(bool on) override;
  bool chunks_apart() const override { return true; }

 private:
  // Consecutive layers and their unit (-1: layers without parameters).
  struct Segment {
    std::vector<std::shared_ptr<nn::Module>> layers;
    int unit = -1;
  };

  void start_gather(size_t unit);
  void ensure_gathered(size_t unit);
  void release(size_t unit);
  void gather_all();
  void release_all();
  // The identity, recorded: its backward runs when the gradient of the unit's output is complete,
  // before any of the unit's own backward nodes; it gathers the unit (and prefetches the next).
  Tensor mark_backward(const Tensor& output, size_t unit);
  void before_backward_of(size_t unit);

  ZeroUnits& units_;
  std::string wrap_policy_;
  size_t min_unit_bytes_;
  bool prefetch_;
  std::vector<Segment> segments_;
  std::vector<dist::WorkPtr> gathering_;  // per unit: an all-gather in flight
  std::vector<bool> resident_;
  bool held_ = false;  // hold_gathered: nothing is released
};

}  // namespace tessera::parallel::zero
