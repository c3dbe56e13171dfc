#include "tessera/parallel/pipeline/pipeline_stage.h"

#include <chrono>

#include "tessera/autograd/node.h"
#include "tessera/observe/trace.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::pipeline {

PipelineStage::PipelineStage(nn::LayerChain layers, dist::ProcessGroupPtr group, PipelineOptions options, LossFn loss)
    : layers_(std::move(layers)), group_(std::move(group)), options_(options), loss_(std::move(loss)), link_(group_) {
  TESSERA_CHECK(!layers_.empty(), "[pipeline] stage ", group_->rank(), " has no layers");
  TESSERA_CHECK(loss_, "[pipeline] needs a loss function");
  actions_ = make_schedule(options_.schedule, stage(), stages(), options_.microbatches);
  link_.set_wire_dtype(options_.wire);
}

Tensor PipelineStage::run_layers(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer.module->forward(h);
  return h;
}

void PipelineStage::run_forward(int64_t m, const Tensor& inputs, const Tensor& targets, int64_t rows) {
  const int64_t M = options_.microbatches;
  // The timeline's compute spans; the waits inside (for the previous stage) are StageLink's "bubble" spans.
  observe::TraceSpan span(observe::tracing_enabled() ? "forward micro-batch " + std::to_string(m) : std::string(),
                          "pipeline");
  Tensor x = is_first() ? slice(inputs, 0, m * rows, (m + 1) * rows) : link_.recv_activation(stage() - 1, m, true);
  received_[m] = x;
  Tensor y = run_layers(x);
  if (is_last()) {
    Tensor loss = loss_(y, slice(targets, 0, m * rows, (m + 1) * rows));
    loss_sum_ += loss.item<float>();
    // Each micro-batch's mean loss weighs 1/M: the sum is the whole batch's mean loss.
    backward_roots_[m] = mul(loss, static_cast<float>(loss_scale_ / static_cast<double>(M)));
  } else {
    sent_shapes_[m] = y.shape();
    backward_roots_[m] = link_.send_activation(y, stage() + 1, m);
  }
}

void PipelineStage::run_backward(int64_t m) {
  observe::TraceSpan span(observe::tracing_enabled() ? "backward micro-batch " + std::to_string(m) : std::string(),
                          "pipeline");
  Tensor root = std::move(backward_roots_[m]);
  backward_roots_[m] = Tensor();  // frees the micro-batch's activations once backward has run
  if (root.defined())
    root.backward();
  else if (!is_last())  // a first stage whose output needs no gradient: drain what stage 1 sends back
    link_.recv_gradient(stage() + 1, m, sent_shapes_[m]);
  received_[m] = Tensor();
}

StepStats PipelineStage::train_step(const Tensor& inputs, const Tensor& targets) {
  using Clock = std::chrono::steady_clock;
  const int64_t M = options_.microbatches;
  int64_t batch = 0;
  if (is_first()) {
    TESSERA_CHECK(inputs.defined() && inputs.dim() >= 1, "[pipeline] the first stage needs the batch's inputs");
    batch = inputs.shape()[0];
  }
  if (is_last()) {
    TESSERA_CHECK(targets.defined() && targets.dim() >= 1, "[pipeline] the last stage needs the batch's targets");
    batch = targets.shape()[0];
  }
  TESSERA_CHECK(!is_first() || !is_last() || inputs.shape()[0] == targets.shape()[0], "[pipeline] inputs hold ",
                inputs.shape()[0], " samples but targets ", targets.shape()[0]);
  TESSERA_CHECK(batch % M == 0, "[pipeline] the batch of ", batch, " samples does not split into ", M,
                " equal micro-batches; make train.batch_size a multiple of parallel.microbatches");
  const int64_t rows = batch / M;
  const auto t0 = Clock::now();
  const double wait0 = link_.wait_seconds();
  const int64_t sent0 = link_.bytes_sent(), received0 = link_.bytes_received();
  backward_roots_.assign(static_cast<size_t>(M), Tensor());
  sent_shapes_.assign(static_cast<size_t>(M), Shape());
  received_.assign(static_cast<size_t>(M), Tensor());
  loss_sum_ = 0.0;
  StepStats stats;
  int64_t held = 0;
  for (const Action& a : actions_) {
    if (a.kind == Action::Kind::Forward) {
      run_forward(a.microbatch, inputs, targets, rows);
      stats.peak_activations = std::max(stats.peak_activations, ++held);
    } else {
      run_backward(a.microbatch);
      --held;
    }
  }
  link_.wait_sends();
  stats.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  stats.compute_seconds = std::max(0.0, stats.wall_seconds - (link_.wait_seconds() - wait0));
  stats.bytes_sent = link_.bytes_sent() - sent0;
  stats.bytes_received = link_.bytes_received() - received0;
  // Every stage reports the step's loss: the last stage has it.
  Tensor loss = Tensor::empty({1});
  loss.data<float>()[0] = static_cast<float>(loss_sum_ / static_cast<double>(M));
  if (stages() > 1) group_->broadcast(loss, stages() - 1)->wait();
  stats.loss = loss.data<float>()[0];
  return stats;
}

Tensor PipelineStage::forward(const Tensor& inputs) {
  NoGradGuard no_grad;
  Tensor x = is_first() ? inputs : link_.recv_activation(stage() - 1, 0, false);
  Tensor y = run_layers(x);
  if (is_last()) return y;
  link_.send_activation(y, stage() + 1, 0);
  link_.wait_sends();
  return Tensor();
}

nn::StateDict PipelineStage::state_dict() const {
  nn::StateDict out;
  for (const auto& layer : layers_)
    for (auto& [name, t] : layer.module->state_dict()) out.emplace_back(layer.prefix + name, t);
  return out;
}

std::vector<Tensor> PipelineStage::parameters() const {
  std::vector<Tensor> out;
  for (const auto& layer : layers_)
    for (auto& p : layer.module->parameters()) out.push_back(p);
  return out;
}

void PipelineStage::train(bool on) {
  for (auto& layer : layers_) layer.module->train(on);
}

}  // namespace tessera::parallel::pipeline
