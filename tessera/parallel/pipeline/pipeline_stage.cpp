#include "tessera/parallel/pipeline/pipeline_stage.h"

#include <chrono>
#include <cmath>
#include <optional>

#include "tessera/autograd/node.h"
#include "tessera/observe/trace.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::pipeline {

PipelineStage::PipelineStage(nn::LayerChain layers, dist::ProcessGroupPtr group, PipelineOptions options, LossFn loss)
    : PipelineStage(std::vector<nn::LayerChain>{std::move(layers)}, std::move(group), options, std::move(loss)) {}

PipelineStage::PipelineStage(std::vector<nn::LayerChain> chunk_layers, dist::ProcessGroupPtr group,
                             PipelineOptions options, LossFn loss)
    : chunks_(std::move(chunk_layers)), group_(std::move(group)), options_(options), loss_(std::move(loss)), link_(group_) {
  TESSERA_CHECK(!chunks_.empty(), "[pipeline] stage ", group_->rank(), " has no model chunks");
  for (size_t c = 0; c < chunks_.size(); ++c) {
    TESSERA_CHECK(!chunks_[c].empty(), "[pipeline] stage ", group_->rank(), " chunk ", c, " has no layers");
    layers_.insert(layers_.end(), chunks_[c].begin(), chunks_[c].end());
  }
  TESSERA_CHECK(loss_, "[pipeline] needs a loss function");
  actions_ = make_schedule(options_.schedule, stage(), stages(), options_.microbatches, chunks());
  link_.set_wire_dtype(options_.wire);
}

Tensor PipelineStage::run_chunk(int chunk, const Tensor& x) {
  Tensor h = x;
  for (auto& layer : chunks_[static_cast<size_t>(chunk)]) h = layer.module->forward(h);
  return h;
}

std::string PipelineStage::span_name(const char* pass, int chunk, int64_t m) const {
  if (!observe::tracing_enabled()) return std::string();
  return std::string(pass) + " micro-batch " + std::to_string(m) + (chunks() > 1 ? " chunk " + std::to_string(chunk) : "");
}

void PipelineStage::run_forward(int chunk, int64_t m, const Tensor& inputs, const Tensor& targets, int64_t rows) {
  const int64_t M = options_.microbatches;
  // The timeline's compute spans; the waits inside (for the previous stage) are StageLink's "bubble" spans.
  observe::TraceSpan span(span_name("forward", chunk, m), "pipeline");
  const size_t at = slot(chunk, m);
  Tensor x;
  if (is_first_virtual(chunk)) {
    x = slice(inputs, 0, m * rows, (m + 1) * rows);
  } else if (const ChunkPlace from = previous_place(chunk); from.stage == stage()) {
    x = std::move(handed_over_[at]);  // ZB-V's turn: chunk 0's output, here already
    handed_over_[at] = Tensor();
  } else {
    x = link_.recv_activation(from.stage, static_cast<int64_t>(at), true);
  }
  received_[at] = x;
  Tensor y = run_chunk(chunk, x);
  if (is_last_virtual(chunk)) {
    Tensor loss = loss_(y, slice(targets, 0, m * rows, (m + 1) * rows));
    loss_sum_ += loss.item<float>();
    // Each micro-batch's mean loss weighs 1/M: the sum is the whole batch's mean loss.
    backward_roots_[at] = mul(loss, static_cast<float>(loss_scale_ / static_cast<double>(M)));
  } else if (const ChunkPlace to = next_place(chunk); to.stage == stage()) {
    // The next chunk takes a leaf of the output; its gradient comes back through handed_over_.
    Tensor leaf = y.detach();
    if (y.requires_grad()) {
      leaf.set_requires_grad(true);
      backward_roots_[at] = y;
    }
    handed_over_[slot(to.chunk, m)] = leaf;
  } else {
    sent_shapes_[at] = y.shape();
    backward_roots_[at] = link_.send_activation(y, to.stage, static_cast<int64_t>(slot(to.chunk, m)));
  }
}

void PipelineStage::run_backward(int chunk, int64_t m) {
  observe::TraceSpan span(span_name("backward", chunk, m), "pipeline");
  const size_t at = slot(chunk, m);
  Tensor root = std::move(backward_roots_[at]);
  backward_roots_[at] = Tensor();  // frees the micro-batch's activations once backward has run
  const ChunkPlace to = is_last_virtual(chunk) ? ChunkPlace{-1, -1} : next_place(chunk);
  Tensor output_grad;  // where the next chunk is this stage's (ZB-V's turn), its input's gradient
  if (to.stage == stage()) {
    const size_t next = slot(to.chunk, m);
    output_grad = std::move(handed_over_[next]);
    handed_over_[next] = Tensor();
    TESSERA_CHECK(!root.defined() || output_grad.defined(), "[pipeline] stage ", stage(), " chunk ", chunk,
                  ": the backward of micro-batch ", m, " ran before chunk ", to.chunk, "'s (the schedule's order)");
  }
  if (root.defined()) {
    std::optional<autograd::DeferWeightGrads> defer;  // ZB-H1's and ZB-V's B: input gradients now, W later
    if (splits_backward(options_.schedule)) defer.emplace(weight_grads_[at]);
    root.backward(output_grad);
  } else if (to.stage >= 0 && to.stage != stage()) {  // output that needs no gradient: drain what comes back
    link_.recv_gradient(to.stage, static_cast<int64_t>(slot(to.chunk, m)), sent_shapes_[at]);
  }
  // ZB-V's turn: the input's gradient, which the previous chunk (this stage's) starts its backward from.
  if (!is_first_virtual(chunk) && previous_place(chunk).stage == stage() && received_[at].requires_grad())
    handed_over_[at] = received_[at].grad();
  received_[at] = Tensor();
}

void PipelineStage::run_weight(int chunk, int64_t m) {
  observe::TraceSpan span(span_name("weight gradients of", chunk, m), "pipeline");
  weight_grads_[slot(chunk, m)].run();
}

StepStats PipelineStage::train_step(const Tensor& inputs, const Tensor& targets) {
  using Clock = std::chrono::steady_clock;
  const int64_t M = options_.microbatches;
  int64_t batch = 0;
  if (holds_input()) {
    TESSERA_CHECK(inputs.defined() && inputs.dim() >= 1, "[pipeline] the first stage needs the batch's inputs");
    batch = inputs.shape()[0];
  }
  if (holds_output()) {
    TESSERA_CHECK(targets.defined() && targets.dim() >= 1, "[pipeline] stage ", stage(), " (the ",
                  schedule_name(options_.schedule), " schedule's output stage) needs the batch's targets");
    batch = targets.shape()[0];
  }
  TESSERA_CHECK(!holds_input() || !holds_output() || inputs.shape()[0] == targets.shape()[0], "[pipeline] inputs hold ",
                inputs.shape()[0], " samples but targets ", targets.shape()[0]);
  TESSERA_CHECK(batch % M == 0, "[pipeline] the batch of ", batch, " samples does not split into ", M,
                " equal micro-batches; make train.batch_size a multiple of parallel.microbatches");
  const int64_t rows = batch / M;
  const auto t0 = Clock::now();
  const double wait0 = link_.wait_seconds();
  const int64_t sent0 = link_.bytes_sent(), received0 = link_.bytes_received();
  const size_t slots = static_cast<size_t>(M) * chunks_.size();
  backward_roots_.assign(slots, Tensor());
  sent_shapes_.assign(slots, Shape());
  received_.assign(slots, Tensor());
  handed_over_.assign(slots, Tensor());
  weight_grads_.assign(slots, autograd::WeightGradQueue());
  loss_sum_ = 0.0;
  StepStats stats;
  int64_t held = 0;
  for (const Action& a : actions_) {
    const auto started = Clock::now();
    const double waited = link_.wait_seconds();
    double* pass_seconds = &stats.weight_seconds;
    if (a.kind == Action::Kind::Forward) {
      run_forward(a.chunk, a.microbatch, inputs, targets, rows);
      stats.peak_activations = std::max(stats.peak_activations, ++held);
      pass_seconds = &stats.forward_seconds;
    } else if (a.kind == Action::Kind::Backward) {
      run_backward(a.chunk, a.microbatch);
      --held;
      pass_seconds = &stats.backward_seconds;
    } else {
      run_weight(a.chunk, a.microbatch);
    }
    *pass_seconds += std::chrono::duration<double>(Clock::now() - started).count() - (link_.wait_seconds() - waited);
  }
  link_.wait_sends();
  stats.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  stats.compute_seconds = std::max(0.0, stats.wall_seconds - (link_.wait_seconds() - wait0));
  stats.bytes_sent = link_.bytes_sent() - sent0;
  stats.bytes_received = link_.bytes_received() - received0;
  // Every stage reports the step's loss: the output stage has it.
  Tensor loss = Tensor::empty({1});
  loss.data<float>()[0] = static_cast<float>(loss_sum_ / static_cast<double>(M));
  if (stages() > 1) group_->blocking_broadcast(loss, output_stage(options_.schedule, stages()));
  stats.loss = loss.data<float>()[0];
  if (splits_backward(options_.schedule) && stages() > 1 && steps_run_ < kPlanningSteps) {
    ++steps_run_;
    plan_from_measured_passes(stats);
  }
  return stats;
}

void PipelineStage::plan_from_measured_passes(const StepStats& stats) {
  const double passes = static_cast<double>(options_.microbatches * chunks());
  Tensor mine = Tensor::empty({3});
  float* m = mine.data<float>();
  m[0] = static_cast<float>(stats.forward_seconds / passes);
  m[1] = static_cast<float>(stats.backward_seconds / passes);
  m[2] = static_cast<float>(stats.weight_seconds / passes);
  Tensor all = Tensor::empty({3 * static_cast<int64_t>(stages())});
  group_->allgather(mine, all)->wait();
  // Every stage plans from these same bytes, so the stages' orders agree; so do the partners'.
  if (options_.same_order_as && options_.same_order_as->size() > 1) options_.same_order_as->blocking_broadcast(all, 0);
  const float* a = all.data<float>();
  std::vector<PassTimes> times(static_cast<size_t>(stages()));
  for (size_t s = 0; s < times.size(); ++s) {
    times[s] = {a[3 * s], a[3 * s + 1], a[3 * s + 2]};
    // A pass the clock did not see (shorter than its resolution) leaves the plan as it was, on
    // every stage alike.
    const bool measured = std::isfinite(times[s].forward) && std::isfinite(times[s].backward) &&
                          std::isfinite(times[s].weight) && times[s].forward > 0 && times[s].backward > 0 &&
                          times[s].weight >= 0;
    if (!measured) return;
  }
  plan_from(times);
}

void PipelineStage::plan_from(const std::vector<PassTimes>& times) {
  TESSERA_CHECK(splits_backward(options_.schedule), "[pipeline] only ZB-H1 and ZB-V plan from pass times; this stage "
                "runs ", schedule_name(options_.schedule));
  actions_ = make_schedule(options_.schedule, stage(), stages(), options_.microbatches, chunks(), times);
  ++plans_;
}

Tensor PipelineStage::forward(const Tensor& inputs) {
  NoGradGuard no_grad;
  Tensor x = inputs;
  // With one micro-batch, a chunk's messages are keyed by the chunk. A chunk whose input is this
  // stage's (ZB-V's turn) takes the previous chunk's output, x as it is.
  for (int c = 0; c < chunks(); ++c) {
    if (!is_first_virtual(c) && previous_place(c).stage != stage()) x = link_.recv_activation(previous_place(c).stage, c, false);
    Tensor y = run_chunk(c, x);
    if (is_last_virtual(c)) {
      link_.wait_sends();
      return y;
    }
    if (const ChunkPlace to = next_place(c); to.stage != stage()) link_.send_activation(y, to.stage, to.chunk);
    x = y;
  }
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
