// GlooTransfer: a send or recv in flight on a gloo unbound buffer (communicator.h's
// PendingTransfer). It owns the unbound buffer, which must outlive the transfer.
#pragma once
#include <memory>
#include <string>

#include <gloo/transport/unbound_buffer.h>

#include "tessera/dist/communicator.h"

namespace tessera::dist {

class GlooTransfer : public PendingTransfer {
 public:
  // `what` names the transfer for errors, e.g. "[gloo send] rank 0 to rank 1 (tag 3)".
  GlooTransfer(std::unique_ptr<gloo::transport::UnboundBuffer> buffer, bool is_send, std::string what)
      : buffer_(std::move(buffer)), is_send_(is_send), what_(std::move(what)) {}
  void wait(Deadline deadline) override;

 private:
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;  // null for an empty message
  bool is_send_;
  std::string what_;
};

}  // namespace tessera::dist
