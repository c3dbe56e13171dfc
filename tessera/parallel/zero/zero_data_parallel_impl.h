// ZeroDataParallel's implementation, shared by its two sources: zero_data_parallel.cpp (the run:
// units, gradients, the step) and zero_whole_state.cpp (the whole model's and optimizer's state,
// gathered from and cut back into the pieces; memory figures). Not part of the public API.
#pragma once
#include <memory>
#include <vector>

#include "tessera/parallel/zero/parameter_layout.h"
#include "tessera/parallel/zero/zero_data_parallel.h"
#include "tessera/parallel/zero/zero_units.h"

namespace tessera::parallel::zero {

class ZeroDataParallel::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(std::shared_ptr<nn::Module> model, dist::ProcessGroupPtr group, ZeroOptions options);
  void register_hooks();

  Tensor forward(const Tensor& input);
  void step(optim::Optimizer& optimizer);
  void attach(optim::Optimizer& optimizer);
  double clip_grad_norm(double max_norm);
  void zero_grad();
  void hold_gathered(bool on);
  void publish_pieces();
  nn::StateDict full_state_dict();
  void load_full_state_dict(const nn::StateDict& state);
  nn::StateDict full_optimizer_state(const optim::Optimizer& optimizer);
  void load_full_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state);
  ZeroMemory memory(const optim::Optimizer* optimizer) const;

  std::shared_ptr<nn::Module> model_;
  ZeroOptions options_;
  // The units and their buffers (zero_units.h), and the stage's policies: where the whole
  // parameters are kept (parameter_layout.h), and whether gradients are reduce-scattered as each
  // unit's are ready (stages 2, 3) or at the end of backward (stage 1).
  ZeroUnits z_;
  std::shared_ptr<ParameterLayout> layout_;
  bool reduce_during_backward_ = false;
  std::vector<size_t> unit_of_, position_in_unit_;  // per parameter
  std::vector<Tensor> pieces_;                      // per parameter: views of z_.shard
  std::vector<Tensor> grad_shard_;                  // per unit: this rank's chunk of the averaged gradient
  const optim::Optimizer* attached_ = nullptr;

 private:
  void plan();
  void bind_parameters_to_units();
  // Gradients.
  void on_grad_ready(size_t index);
  void begin_backward();
  void copy_gradients_of(size_t unit);
  void launch_ready_units();
  // Folds finished reductions into the gradient pieces, oldest first, until at most `in_flight` are
  // left: a unit's whole gradients are freed as soon as its reduce-scatter is done, not at the end
  // of backward (which would hold every unit's at once: 4Ψ at the peak).
  void drain_reductions(size_t in_flight);
  void finish_backward();
  Tensor gather_chunks(const Tensor& chunk, size_t unit);

  std::vector<size_t> launch_order_;  // units in the order their gradients are expected ready
  bool in_backward_ = false;
  std::vector<bool> ready_;
  std::vector<size_t> pending_;       // per unit: gradients not yet ready
  size_t next_to_launch_ = 0;
  size_t next_to_drain_ = 0;          // position in launch_order_ of the oldest reduction not folded in
  std::vector<Tensor> grad_flat_, received_;
  std::vector<dist::WorkPtr> reducing_;
};

}  // namespace tessera::parallel::zero
