#include "tessera/parallel/pipeline/p2p.h"

#include <algorithm>
#include <chrono>

#include "tessera/autograd/node.h"
#include "tessera/observe/trace.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/functional.h"
#include "tessera/parallel/pipeline/stage_header.h"

namespace tessera::parallel::pipeline {

namespace {

int tag_of(int64_t tag) {
  TESSERA_CHECK(tag >= 0 && tag < (int64_t{1} << 30), "[pipeline] message tag ", tag, " out of range");
  return static_cast<int>(tag);
}

// Waits for `work` (bounded by its group's timeout), adding the time to `waited`; a failure keeps
// its type and gains `what` in front.
void wait_with_context(const dist::WorkPtr& work, const std::string& what, double& waited) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  try {
    work->wait();
  } catch (const TimeoutError& e) {
    throw TimeoutError(what + ": " + e.what());
  } catch (const PeerFailureError& e) {
    throw PeerFailureError(what + ": " + e.what());
  } catch (const ValueError& e) {
    throw ValueError(what + ": " + e.what());
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
  waited += std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

StageLink::StageLink(dist::ProcessGroupPtr group) : group_(std::move(group)) {
  TESSERA_CHECK(group_, "[pipeline] StageLink needs a process group");
}

void StageLink::set_wire_dtype(DType wire) {
  check_wire_dtype(wire, "[pipeline] activations");
  wire_ = wire;
}

void StageLink::post_send(const Tensor& x, int peer, int64_t header_tag, int64_t payload_tag) {
  observe::TraceSpan span(observe::tracing_enabled() ? "send to stage " + std::to_string(peer) : std::string(), "pipeline");
  const StageHeader fields = encode_stage_header(x.shape(), x.dtype());
  Tensor header = Tensor::empty({kStageHeaderSize}, DType::Int64);
  std::copy(fields.begin(), fields.end(), header.data<int64_t>());
  Tensor payload;
  {
    NoGradGuard no_grad;
    payload = x.is_contiguous() ? x.detach() : contiguous(x);
  }
  pending_sends_.push_back(group_->send(header, peer, tag_of(header_tag)));
  if (payload.numel() > 0) pending_sends_.push_back(group_->send(payload, peer, tag_of(payload_tag)));
  bytes_sent_ += static_cast<int64_t>(payload.numel() * dtype_size(payload.dtype()));
}

Tensor StageLink::receive(int peer, int64_t header_tag, int64_t payload_tag, const std::string& what) {
  const std::string context = receive_context(what, peer);
  // Time spent here is the pipeline's bubble: this stage idles until its neighbour sends.
  observe::TraceSpan span(observe::tracing_enabled() ? "wait for " + what + " from stage " + std::to_string(peer)
                                                     : std::string(),
                          "bubble");
  Tensor header = Tensor::empty({kStageHeaderSize}, DType::Int64);
  wait_with_context(group_->recv(header, peer, tag_of(header_tag)), context, wait_seconds_);
  StageHeader fields;
  std::copy(header.data<int64_t>(), header.data<int64_t>() + kStageHeaderSize, fields.begin());
  const StageTensorSpec spec = decode_stage_header(fields, context);
  Tensor x = Tensor::empty(spec.shape, spec.dtype);
  if (x.numel() > 0) wait_with_context(group_->recv(x, peer, tag_of(payload_tag)), context, wait_seconds_);
  bytes_received_ += static_cast<int64_t>(x.numel() * dtype_size(x.dtype()));
  return x;
}

std::string StageLink::receive_context(const std::string& what, int peer) const {
  return "[pipeline] stage " + std::to_string(group_->rank()) + " receiving " + what + " from stage " +
         std::to_string(peer);
}

void StageLink::post_gradient(const Tensor& grad, int peer, int64_t microbatch) {
  observe::TraceSpan span(observe::tracing_enabled() ? "send the gradient of micro-batch " + std::to_string(microbatch) +
                                                           " to stage " + std::to_string(peer)
                                                     : std::string(),
                          "pipeline");
  Tensor g;
  {
    NoGradGuard no_grad;
    g = wire_ == DType::Float32 ? contiguous(grad) : grad.to(wire_);
  }
  pending_sends_.push_back(group_->send(g, peer, tag_of(3 * microbatch + 2)));
  bytes_sent_ += static_cast<int64_t>(g.numel() * dtype_size(g.dtype()));
}

Tensor StageLink::recv_gradient(int peer, int64_t microbatch, const Shape& shape) {
  observe::TraceSpan span(observe::tracing_enabled() ? "wait for the gradient of micro-batch " + std::to_string(microbatch) +
                                                           " from stage " + std::to_string(peer)
                                                     : std::string(),
                          "bubble");
  Tensor g = Tensor::empty(shape, wire_);
  if (g.numel() > 0)
    wait_with_context(group_->recv(g, peer, tag_of(3 * microbatch + 2)),
                      receive_context("the gradient of micro-batch " + std::to_string(microbatch), peer),
                      wait_seconds_);
  bytes_received_ += static_cast<int64_t>(g.numel() * dtype_size(wire_));
  return wire_ == DType::Float32 ? g : g.to(DType::Float32);
}

Tensor StageLink::send_activation(const Tensor& x, int peer, int64_t microbatch) {
  if (wire_ != DType::Float32 && x.dtype() == DType::Float32) {
    NoGradGuard no_grad;
    post_send(x.to(wire_), peer, 3 * microbatch, 3 * microbatch + 1);
  } else {
    post_send(x, peer, 3 * microbatch, 3 * microbatch + 1);
  }
  if (!autograd::needs_grad({x})) return Tensor();
  // The token's value is irrelevant; its backward fetches x's gradient from the stage that used x.
  Tensor token = zeros({1});
  Shape shape = x.shape();
  return autograd::record(token, "PipelineSendBackward", {x}, [this, peer, microbatch, shape](const Tensor&) {
    return std::vector<Tensor>{recv_gradient(peer, microbatch, shape)};
  }, autograd::Saves::Nothing);
}

Tensor StageLink::recv_activation(int peer, int64_t microbatch, bool requires_grad) {
  Tensor x = receive(peer, 3 * microbatch, 3 * microbatch + 1, "micro-batch " + std::to_string(microbatch));
  if (wire_ != DType::Float32 && x.dtype() == wire_) x = x.to(DType::Float32);
  if (requires_grad) {
    TESSERA_CHECK(x.dtype() == DType::Float32, "[pipeline] stage ", group_->rank(), " received ",
                  dtype_name(x.dtype()), " activations for micro-batch ", microbatch,
                  "; only float32 activations can carry gradients");
    x.set_requires_grad(true);
    x.register_grad_ready_hook([this, peer, microbatch](const Tensor& leaf) { post_gradient(leaf.grad(), peer, microbatch); });
  }
  return x;
}

// Plain transfers use tags above any micro-batch's, so they never match an activation's.
constexpr int64_t kPlainTagBase = int64_t{1} << 28;

void StageLink::send_tensor(const Tensor& x, int peer, int64_t tag) {
  post_send(x, peer, kPlainTagBase + 2 * tag, kPlainTagBase + 2 * tag + 1);
}

Tensor StageLink::recv_tensor(int peer, int64_t tag, const std::string& what) {
  return receive(peer, kPlainTagBase + 2 * tag, kPlainTagBase + 2 * tag + 1, what);
}

void StageLink::wait_sends() {
  observe::TraceSpan span("wait for the sends to finish", "bubble");
  std::vector<dist::WorkPtr> sends;
  sends.swap(pending_sends_);
  for (auto& w : sends) wait_with_context(w, "[pipeline] stage " + std::to_string(group_->rank()) + " sending", wait_seconds_);
}

}  // namespace tessera::parallel::pipeline
