#include "tessera/dist/backends/gloo/gloo_communicator.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>

#include "tessera/core/error.h"
#include "tessera/dist/backends/backend.h"
#include "tessera/dist/backends/gloo/gloo_errors.h"
#include "tessera/dist/backends/gloo/gloo_rendezvous.h"
#include "tessera/dist/backends/gloo/gloo_transfer.h"
#include "tessera/dist/store/prefix_store.h"

namespace tessera::dist {

using tessera::detail::concat;

namespace {

// A rank whose collective times out closes all its connections (gloo's way of cancelling the
// operations in flight), so its peers usually see "connection closed by peer" a moment before
// their own deadline: the same timeout, not a dead peer. The rank that timed out leaves this note
// in the group's store, and a rank that sees a closed connection looks for it, for at most
// kTimeoutNoteWait, before it calls the peer dead.
constexpr const char* kTimeoutNoteKey = "gloo/timed_out";
constexpr Milliseconds kTimeoutNoteWait{200};

// What is left of `deadline`, at least 1 ms (AlltoallOptions rejects a zero timeout, and gloo
// checks for completion before it gives up, so an operation that is already done still succeeds).
Milliseconds time_left(Deadline deadline) {
  return std::max(std::chrono::ceil<Milliseconds>(deadline - detail::Clock::now()), Milliseconds(1));
}

// Gloo's typed setters only use sizeof(T): pick an unsigned integer of the element's width.
template <typename F> void with_element_type(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
  }
  throw NotSupportedError(concat("[gloo] dtype ", dtype_name(dtype), " is not supported"));
}

// Every dtype reduces through reduce_pair, the kernel all backends share, so gloo gives the same
// bits as shm and mpi (bfloat16 accumulating through float32, NaN handling of max/min).
gloo::AllreduceOptions::Func reducer(DType dtype, ReduceOp op) {
  return [dtype, op](void* out, const void* a, const void* b, size_t n) {
    reduce_pair(out, a, b, static_cast<int64_t>(n), dtype, op);
  };
}

std::vector<size_t> to_sizes(std::span<const int64_t> counts) {
  return std::vector<size_t>(counts.begin(), counts.end());
}

// A send or recv that could not even be posted: the error surfaces at wait(), like any other.
class FailedTransfer : public PendingTransfer {
 public:
  explicit FailedTransfer(std::exception_ptr error) : error_(std::move(error)) {}
  void wait(Deadline) override { std::rethrow_exception(error_); }

 private:
  std::exception_ptr error_;
};

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<Store> store,
                                   int rank, int size, Milliseconds timeout)
    : device_(std::move(device)), store_(std::move(store)), rank_(rank), size_(size) {
  Deadline deadline = detail::deadline_after(timeout);
  collectives_ = detail::connect_gloo_mesh(device_, std::make_shared<PrefixStore>("gloo/collectives", store_), rank_,
                                           size_, timeout);
  point_to_point_ = detail::connect_gloo_mesh(device_, std::make_shared<PrefixStore>("gloo/p2p", store_), rank_,
                                              size_, time_left(deadline));
}

template <typename Body> void GlooCommunicator::run(const char* op, Deadline deadline, Body&& body) {
  try {
    body(time_left(deadline));
  } catch (const tessera::Error&) {
    throw;  // already ours (e.g. an unsupported dtype)
  } catch (const std::exception& e) {
    fail(op, e, deadline);
  }
}

void GlooCommunicator::fail(const char* op, const std::exception& e, Deadline deadline) {
  detail::GlooError error = detail::classify_gloo_error(e);
  if (error.kind == detail::GlooFailure::Timeout) {
    try {
      store_->set(kTimeoutNoteKey, std::to_string(rank_));
    } catch (const std::exception&) {
      // Only a hint for the peers; the timeout below is what matters.
    }
  } else if (error.kind == detail::GlooFailure::PeerGone) {
    std::string noted;
    try {
      auto wait = std::clamp(std::chrono::ceil<Milliseconds>(deadline - detail::Clock::now()), Milliseconds(0),
                             kTimeoutNoteWait);
      if (wait > Milliseconds(0)) store_->wait({kTimeoutNoteKey}, wait);
      if (store_->check({kTimeoutNoteKey})) noted = store_->get_string(kTimeoutNoteKey);
    } catch (const std::exception&) {
      // No note (or no store): the peer is gone.
    }
    if (!noted.empty()) {
      error.kind = detail::GlooFailure::Timeout;
      error.message += concat(" (rank ", noted, " timed out in this ", op, " and closed its connections)");
    } else if (detail::Clock::now() >= deadline) {
      error.kind = detail::GlooFailure::Timeout;
    }
  }
  detail::throw_gloo_failure(error.kind, concat("[gloo ", op, "] rank ", rank_, ": ", error.message));
}

// ---- collectives ----------------------------------------------------------------------------

void GlooCommunicator::allreduce(Buffer data, ReduceOp op, Deadline deadline) {
  if (size_ == 1) return;
  run("allreduce", deadline, [&](Milliseconds timeout) {
    with_element_type(data.dtype, [&](auto element) {
      using T = decltype(element);
      gloo::AllreduceOptions opts(collectives_);
      opts.setOutput(data.as<T>(), static_cast<size_t>(data.count));  // in place: output is also the input
      opts.setReduceFunction(reducer(data.dtype, op));
      opts.setTag(next_tag());
      opts.setTimeout(timeout);
      gloo::allreduce(opts);
    });
  });
}

void GlooCommunicator::broadcast(Buffer data, int root, Deadline deadline) {
  if (size_ == 1) return;
  run("broadcast", deadline, [&](Milliseconds timeout) {
    with_element_type(data.dtype, [&](auto element) {
      using T = decltype(element);
      gloo::BroadcastOptions opts(collectives_);
      opts.setOutput(data.as<T>(), static_cast<size_t>(data.count));  // in place, on the root too
      opts.setRoot(root);
      opts.setTag(next_tag());
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
    });
  });
}

void GlooCommunicator::reduce(Buffer data, ReduceOp op, int root, Deadline deadline) {
  if (size_ == 1) return;
  run("reduce", deadline, [&](Milliseconds timeout) {
    with_element_type(data.dtype, [&](auto element) {
      using T = decltype(element);
      gloo::ReduceOptions opts(collectives_);
      opts.setOutput(data.as<T>(), static_cast<size_t>(data.count));  // in place; scratch on non-roots
      opts.setRoot(root);
      opts.setReduceFunction(reducer(data.dtype, op));
      opts.setTag(next_tag());
      opts.setTimeout(timeout);
      gloo::reduce(opts);
    });
  });
}

void GlooCommunicator::allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) {
  // Our own block goes in first; gloo's allgatherv then only moves the others' (no input buffer:
  // "the output is primed"), which also spares gloo a null pointer for an empty input.
  const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, int64_t{0});
  if (input.count > 0) std::memmove(output.slice(offset, input.count).data, input.data, input.nbytes());
  if (size_ == 1) return;
  run("allgather", deadline, [&](Milliseconds timeout) {
    with_element_type(output.dtype, [&](auto element) {
      using T = decltype(element);
      gloo::AllgathervOptions opts(collectives_);
      opts.setOutput(output.as<T>(), to_sizes(counts));
      opts.setTag(next_tag());
      opts.setTimeout(timeout);
      gloo::allgatherv(opts);
    });
  });
}

void GlooCommunicator::reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op,
                                      Deadline deadline) {
  const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, int64_t{0});
  if (size_ == 1) {
    if (output.count > 0) std::memmove(output.data, input.slice(offset, output.count).data, output.nbytes());
    return;
  }
  // First version: an allreduce of the whole input into scratch, then our segment. It moves twice
  // the bytes a ring reduce-scatter would (2(p-1)/p of the input instead of (p-1)/p), but it is
  // gloo's pipelined ring and correct for any counts; gloo's own ReduceScatterHalvingDoubling is
  // an old-style algorithm (sum only, no per-call timeout, a handshake per instance).
  std::vector<std::byte> scratch(input.nbytes());
  run("reduce_scatter", deadline, [&](Milliseconds timeout) {
    with_element_type(input.dtype, [&](auto element) {
      using T = decltype(element);
      gloo::AllreduceOptions opts(collectives_);
      opts.setInput(input.as<T>(), static_cast<size_t>(input.count));
      opts.setOutput(reinterpret_cast<T*>(scratch.data()), static_cast<size_t>(input.count));
      opts.setReduceFunction(reducer(input.dtype, op));
      opts.setTag(next_tag());
      opts.setTimeout(timeout);
      gloo::allreduce(opts);
    });
  });
  if (output.count > 0) {
    std::memcpy(output.data, scratch.data() + static_cast<size_t>(offset) * dtype_size(input.dtype), output.nbytes());
  }
}

void GlooCommunicator::alltoall(Buffer input, Buffer output, Deadline deadline) {
  if (size_ == 1) {
    std::memmove(output.data, input.data, input.nbytes());
    return;
  }
  run("alltoall", deadline, [&](Milliseconds timeout) {
    with_element_type(input.dtype, [&](auto element) {
      using T = decltype(element);
      gloo::AlltoallOptions opts(collectives_);
      opts.setInput(input.as<T>(), static_cast<size_t>(input.count));
      opts.setOutput(output.as<T>(), static_cast<size_t>(output.count));
      opts.setTag(next_tag());
      opts.setTimeout(timeout);
      gloo::alltoall(opts);
    });
  });
}

void GlooCommunicator::barrier(Deadline deadline) {
  if (size_ == 1) return;
  run("barrier", deadline, [&](Milliseconds timeout) {
    gloo::BarrierOptions opts(collectives_);
    opts.setTag(next_tag());
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  });
}

// ---- point to point -------------------------------------------------------------------------

std::unique_ptr<PendingTransfer> GlooCommunicator::post_send(Buffer data, int peer, int tag) {
  return post_transfer(true, data, peer, tag);
}

std::unique_ptr<PendingTransfer> GlooCommunicator::post_recv(Buffer data, int peer, int tag) {
  return post_transfer(false, data, peer, tag);
}

std::unique_ptr<PendingTransfer> GlooCommunicator::post_transfer(bool is_send, Buffer data, int peer, int tag) {
  std::string what = concat("[gloo ", is_send ? "send" : "recv", "] rank ", rank_, is_send ? " to rank " : " from rank ",
                            peer, " (tag ", tag, ")");
  // Both sides agree on the size, so an empty message is skipped on both.
  if (data.nbytes() == 0) return std::make_unique<GlooTransfer>(nullptr, is_send, std::move(what));
  try {
    auto buffer = point_to_point_->createUnboundBuffer(data.data, data.nbytes());
    const uint64_t slot = (kPointToPointSlotPrefix << 56) | static_cast<uint32_t>(tag);
    if (is_send) {
      buffer->send(peer, slot);
    } else {
      buffer->recv(peer, slot);
    }
    return std::make_unique<GlooTransfer>(std::move(buffer), is_send, std::move(what));
  } catch (const std::exception& e) {
    detail::GlooError error = detail::classify_gloo_error(e);
    try {
      detail::throw_gloo_failure(error.kind, concat(what, ": ", error.message));
    } catch (...) {
      return std::make_unique<FailedTransfer>(std::current_exception());
    }
  }
}

// ---- subgroups ------------------------------------------------------------------------------

std::unique_ptr<Communicator> GlooCommunicator::split(std::span<const int> ranks, std::shared_ptr<Store> store,
                                                      Milliseconds timeout) {
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  TESSERA_CHECK(me != ranks.end(), "[gloo split] rank ", rank_, " is not among the ranks of the new group");
  int new_rank = static_cast<int>(me - ranks.begin());
  // The device (its listening socket and event loop) is shared; the connections are new.
  return std::make_unique<GlooCommunicator>(device_, std::move(store), new_rank, static_cast<int>(ranks.size()),
                                            timeout);
}

std::unique_ptr<Communicator> make_gloo_communicator(const BackendContext& context) {
  auto device = detail::make_gloo_device(detail::gloo_bind_host(context.local_size, context.size));
  return std::make_unique<GlooCommunicator>(std::move(device), context.store, context.rank, context.size,
                                            context.timeout);
}

}  // namespace tessera::dist
