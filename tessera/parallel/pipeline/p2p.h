// Point-to-point transfers between pipeline stages, aware of autograd.
//
// Forward, stage s sends its output to stage s+1 with send_activation, which returns a one-element
// token recorded as a function of the output; stage s+1 receives it with recv_activation, a leaf that
// requires grad. Backward runs in the opposite direction without the schedule's help: once the
// received leaf's gradient is final (a grad-ready hook), it is sent back to stage s; backward from
// stage s's token receives that gradient and carries it on into stage s's graph. So a stage's
// backward for one micro-batch is `token.backward()` on all but the last stage, `loss.backward()`
// on the last.
//
// Each message is a small header (stage_header.h: dtype, rank, sizes) and then the payload, so the receiver needs
// no shapes in advance. Tags: micro-batch m uses 3m (header), 3m+1 (payload) and 3m+2 (gradient),
// so several micro-batches can be in flight between a pair of stages without mixing. Sends are
// posted at once and completed by wait_sends(); every receive waits at most the group's timeout
// and its error names the stage, the micro-batch and the peer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"

namespace tessera::parallel::pipeline {

class StageLink {
 public:
  // `group`: the pipeline's ranks, stage s being rank s of the group.
  explicit StageLink(dist::ProcessGroupPtr group);

  // Sends `x` to `peer` as micro-batch `microbatch`; returns the token described above (undefined
  // when x needs no gradient).
  Tensor send_activation(const Tensor& x, int peer, int64_t microbatch);
  // Receives micro-batch `microbatch` from `peer`; with requires_grad the result is a leaf whose
  // gradient goes back to `peer` during backward.
  Tensor recv_activation(int peer, int64_t microbatch, bool requires_grad);

  // The gradient a stage sends back for micro-batch `microbatch` (shape of the activation sent), for a
  // first stage whose output needs no gradient and so has no token to receive it through.
  Tensor recv_gradient(int peer, int64_t microbatch, const Shape& shape);

  // Plain tensors (float32 or int64) with their header, no autograd: checkpoint gathering.
  void send_tensor(const Tensor& x, int peer, int64_t tag);
  Tensor recv_tensor(int peer, int64_t tag, const std::string& what);

  // Activations and gradients travel as float32 (the default) or bfloat16 (PipelineOptions::wire);
  // they arrive as float32 either way. Plain tensors travel as they are.
  void set_wire_dtype(DType wire);

  // Completes every send posted so far (each bounded by the group's timeout).
  void wait_sends();

  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t bytes_received() const { return bytes_received_; }
  // Seconds spent blocked in receives and wait_sends (the pipeline's idle time, partly).
  double wait_seconds() const { return wait_seconds_; }

 private:
  void post_send(const Tensor& x, int peer, int64_t header_tag, int64_t payload_tag);
  Tensor receive(int peer, int64_t header_tag, int64_t payload_tag, const std::string& what);
  void post_gradient(const Tensor& grad, int peer, int64_t microbatch);
  // "[pipeline] stage 1 receiving <what> from stage 0", the front of every receive's error.
  std::string receive_context(const std::string& what, int peer) const;

  dist::ProcessGroupPtr group_;
  DType wire_ = DType::Float32;
  std::vector<dist::WorkPtr> pending_sends_;
  int64_t bytes_sent_ = 0, bytes_received_ = 0;
  double wait_seconds_ = 0.0;
};

}  // namespace tessera::parallel::pipeline
