// ProcessGroup's collective entry points: each checks its arguments, names the call (op, dtype,
// shape and the caller's file:line, for the flight record and the collective check) and queues it
// on the group's executor (process_group.cpp). The Tensor overloads call the Buffer forms with the
// tensors to keep alive until the task has run.
#include <algorithm>
#include <numeric>
#include <source_location>
#include <span>

#include "tessera/core/error.h"
#include "tessera/dist/issuing_blocking.h"
#include "tessera/dist/process_group.h"
#include "tessera/ops/ops.h"

namespace tessera::dist {

using tessera::detail::concat;

namespace {

// Keeps the tensors of a send/recv alive until the transfer is waited on.
class TransferKeepingTensors : public PendingTransfer {
 public:
  TransferKeepingTensors(std::unique_ptr<PendingTransfer> inner, std::vector<Tensor> keep)
      : inner_(std::move(inner)), keep_(std::move(keep)) {}
  void wait(Deadline deadline) override { inner_->wait(deadline); }

 private:
  std::unique_ptr<PendingTransfer> inner_;
  std::vector<Tensor> keep_;
};

std::string buffer_details(const Buffer& b) { return concat(dtype_name(b.dtype), " x ", b.count); }

std::string counts_text(std::span<const int64_t> counts) {
  std::string s = "[";
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(counts[i]);
  }
  return s + "]";
}

int64_t total(const std::vector<int64_t>& counts) { return std::accumulate(counts.begin(), counts.end(), int64_t{0}); }

// The file:line of the user's call that is enqueuing a collective on this thread: set by each public
// collective for the duration of its call, read by enqueue.
thread_local std::source_location current_call_site;
thread_local bool has_call_site = false;

struct CallSiteScope {
  explicit CallSiteScope(const std::source_location& where) {
    current_call_site = where;
    has_call_site = true;
  }
  ~CallSiteScope() { has_call_site = false; }
};

// The key of a call issued from this thread's current call site (CallSiteScope).
detail::CallKey call_key(const char* op, std::array<int64_t, 4> numbers = {}, std::span<const int64_t> counts = {}) {
  detail::CallKey key;
  key.op = op;
  key.numbers = numbers;
  key.counts = counts;
  if (has_call_site) {
    key.file = current_call_site.file_name();
    key.line = current_call_site.line();
  }
  return key;
}

}  // namespace

// ---- argument checks ------------------------------------------------------------------------

Buffer ProcessGroup::checked_buffer(const Tensor& tensor, const char* op, const char* name) const {
  TESSERA_CHECK(tensor.defined(), "[", op, "] ", name, " is an undefined tensor");
  TESSERA_CHECK(communicator_->takes(tensor.device()), "[", op, "] ", name, " is on ", tensor.device().str(),
                "; backend ", backend_name(), " takes ", communicator_->takes(cuda_device(0)) ? "CPU and CUDA" : "CPU",
                " tensors");
  TESSERA_CHECK(tensor.is_contiguous(), "[", op, "] ", name, " must be contiguous (call .contiguous() first)");
  return Buffer{tensor.data_ptr(), tensor.numel(), tensor.dtype(), tensor.device()};
}

void ProcessGroup::check_device(const Buffer& data, const char* op) const {
  TESSERA_CHECK(communicator_->takes(data.device), "[", op, "] a buffer on ", data.device.str(), ": backend ",
                backend_name(), " does not take ", data.device.str(), " memory");
}

void ProcessGroup::check_devices(const Buffer& input, const Buffer& output, const char* op) const {
  check_device(input, op);
  TESSERA_CHECK(input.device == output.device, "[", op, "] input is on ", input.device.str(), " but output on ",
                output.device.str());
}

// Avg's second pass, where the backend only sums: on the host. A backend that takes device memory
// averages in its own pass (NCCL's ncclAvg), so a device buffer never comes here.
void ProcessGroup::divide_by_size(Buffer data) const {
  TESSERA_ASSERT(data.device.is_cpu(), "backend ", backend_name(), " sums ", data.device.str(),
                 " buffers without averaging them (Communicator::reduces_average)");
  divide_in_place(data, size_);
}

void ProcessGroup::check_rank(int r, const char* op, const char* what) const {
  TESSERA_CHECK(r >= 0 && r < size_, "[", op, "] ", what, " ", r, " is not a rank of this group of ", size_);
}

// ---- collectives ----------------------------------------------------------------------------
// Each Tensor overload checks its tensors, then calls the Buffer form with the tensors to keep
// alive until the task has run.

// Avg is a sum and a division by the group's size: in the backend's own pass when it can
// (Communicator::reduces_average), else as a second pass here.
ReduceOp ProcessGroup::backend_op(ReduceOp op) const {
  return op == ReduceOp::Avg && !communicator_->reduces_average() ? ReduceOp::Sum : op;
}

bool ProcessGroup::divides_after(ReduceOp op) const { return backend_op(op) != op; }

WorkPtr ProcessGroup::allreduce(Buffer data, ReduceOp op, std::source_location where) {
  CallSiteScope site(where);
  return allreduce_buffer(data, op, {});
}

WorkPtr ProcessGroup::allreduce(const Tensor& tensor, ReduceOp op, std::source_location where) {
  CallSiteScope site(where);
  return allreduce_buffer(checked_buffer(tensor, "allreduce", "tensor"), op, {tensor});
}

// Issues with the blocking flag set (enqueue_task then wakes no worker), and waits.
template <class Issue>
void issue_and_wait(Issue issue) {
  WorkPtr work;
  {
    detail::BlockingScope blocking;
    work = issue();
  }
  work->wait();
}

void ProcessGroup::blocking_allreduce(const Tensor& tensor, ReduceOp op, std::source_location where) {
  issue_and_wait([&] { return allreduce(tensor, op, where); });
}

void ProcessGroup::blocking_broadcast(const Tensor& tensor, int root, std::source_location where) {
  issue_and_wait([&] { return broadcast(tensor, root, where); });
}

void ProcessGroup::blocking_barrier(std::source_location where) {
  issue_and_wait([&] { return barrier(where); });
}

WorkPtr ProcessGroup::allreduce_buffer(Buffer data, ReduceOp op, std::vector<Tensor> keep) {
  check_device(data, "allreduce");
  return enqueue(call_key("allreduce", {static_cast<int64_t>(op), static_cast<int64_t>(data.dtype), data.count}),
                 [&] { return concat(reduce_op_name(op), ", ", buffer_details(data)); }, std::move(keep),
                 [this, data, op](Deadline d) {
                   if (data.count == 0) return;
                   communicator_->allreduce(data, backend_op(op), d);
                   if (divides_after(op)) divide_by_size(data);
                 }, data.device);
}

WorkPtr ProcessGroup::broadcast(Buffer data, int root, std::source_location where) {
  CallSiteScope site(where);
  return broadcast_buffer(data, root, {});
}

WorkPtr ProcessGroup::broadcast(const Tensor& tensor, int root, std::source_location where) {
  CallSiteScope site(where);
  return broadcast_buffer(checked_buffer(tensor, "broadcast", "tensor"), root, {tensor});
}

WorkPtr ProcessGroup::broadcast_buffer(Buffer data, int root, std::vector<Tensor> keep) {
  check_rank(root, "broadcast", "root");
  check_device(data, "broadcast");
  return enqueue(call_key("broadcast", {root, static_cast<int64_t>(data.dtype), data.count}),
                 [&] { return concat("root ", root, ", ", buffer_details(data)); }, std::move(keep),
                 [this, data, root](Deadline d) {
                   if (data.count > 0) communicator_->broadcast(data, root, d);
                 }, data.device);
}

WorkPtr ProcessGroup::reduce(const Tensor& tensor, ReduceOp op, int root, std::source_location where) {
  CallSiteScope site(where);
  Buffer data = checked_buffer(tensor, "reduce", "tensor");
  check_rank(root, "reduce", "root");
  return enqueue(call_key("reduce", {static_cast<int64_t>(op), root, static_cast<int64_t>(data.dtype), data.count}),
                 [&] { return concat(reduce_op_name(op), ", root ", root, ", ", buffer_details(data)); }, {tensor},
                 [this, data, op, root](Deadline d) {
                   if (data.count == 0) return;
                   communicator_->reduce(data, backend_op(op), root, d);
                   if (divides_after(op) && rank_ == root) divide_by_size(data);
                 }, data.device);
}

WorkPtr ProcessGroup::allgather(Buffer input, Buffer output, std::vector<int64_t> counts, std::source_location where) {
  CallSiteScope site(where);
  return allgather_buffer(input, output, std::move(counts), {});
}

WorkPtr ProcessGroup::allgather(const Tensor& input, const Tensor& output, std::source_location where) {
  CallSiteScope site(where);
  Buffer in = checked_buffer(input, "allgather", "input");
  Buffer out = checked_buffer(output, "allgather", "output");
  TESSERA_CHECK(out.count == in.count * size_, "[allgather] output has ", out.count, " elements; expected ",
                size_, " x ", in.count, " (one input per rank)");
  return allgather_buffer(in, out, std::vector<int64_t>(static_cast<size_t>(size_), in.count), {input, output});
}

WorkPtr ProcessGroup::allgather(const Tensor& input, const Tensor& output, std::vector<int64_t> counts,
                                std::source_location where) {
  CallSiteScope site(where);
  return allgather_buffer(checked_buffer(input, "allgather", "input"), checked_buffer(output, "allgather", "output"),
                          std::move(counts), {input, output});
}

WorkPtr ProcessGroup::allgather_buffer(Buffer input, Buffer output, std::vector<int64_t> counts,
                                       std::vector<Tensor> keep) {
  check_counts("allgather", counts);
  check_devices(input, output, "allgather");
  TESSERA_CHECK(input.count == counts[static_cast<size_t>(rank_)], "[allgather] rank ", rank_, " input has ",
                input.count, " elements but counts says ", counts[static_cast<size_t>(rank_)]);
  TESSERA_CHECK(output.count == total(counts), "[allgather] output has ", output.count,
                " elements; the counts add up to ", total(counts));
  TESSERA_CHECK(input.dtype == output.dtype, "[allgather] input is ", dtype_name(input.dtype), " but output is ",
                dtype_name(output.dtype));
  const detail::CallKey key = call_key("allgather", {static_cast<int64_t>(input.dtype)}, counts);
  return enqueue(key, [&] { return concat(dtype_name(input.dtype), ", counts ", counts_text(key.counts)); }, std::move(keep),
                 [this, input, output, counts = std::move(counts)](Deadline d) {
    if (total(counts) > 0) communicator_->allgather(input, output, counts, d);
  }, input.device);
}

WorkPtr ProcessGroup::reduce_scatter(Buffer input, Buffer output, std::vector<int64_t> counts, ReduceOp op,
                                     std::source_location where) {
  CallSiteScope site(where);
  return reduce_scatter_buffer(input, output, std::move(counts), op, {});
}

WorkPtr ProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                     std::source_location where) {
  CallSiteScope site(where);
  Buffer in = checked_buffer(input, "reduce_scatter", "input");
  Buffer out = checked_buffer(output, "reduce_scatter", "output");
  TESSERA_CHECK(in.count == out.count * size_, "[reduce_scatter] input has ", in.count, " elements; expected ",
                size_, " x ", out.count, " (one output block per rank)");
  return reduce_scatter_buffer(in, out, std::vector<int64_t>(static_cast<size_t>(size_), out.count), op,
                               {input, output});
}

WorkPtr ProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output, std::vector<int64_t> counts,
                                     ReduceOp op, std::source_location where) {
  CallSiteScope site(where);
  return reduce_scatter_buffer(checked_buffer(input, "reduce_scatter", "input"),
                               checked_buffer(output, "reduce_scatter", "output"), std::move(counts), op,
                               {input, output});
}

WorkPtr ProcessGroup::reduce_scatter_buffer(Buffer input, Buffer output, std::vector<int64_t> counts, ReduceOp op,
                                            std::vector<Tensor> keep) {
  check_counts("reduce_scatter", counts);
  check_devices(input, output, "reduce_scatter");
  TESSERA_CHECK(output.count == counts[static_cast<size_t>(rank_)], "[reduce_scatter] rank ", rank_,
                " output has ", output.count, " elements but counts says ", counts[static_cast<size_t>(rank_)]);
  TESSERA_CHECK(input.count == total(counts), "[reduce_scatter] input has ", input.count,
                " elements; the counts add up to ", total(counts));
  TESSERA_CHECK(input.dtype == output.dtype, "[reduce_scatter] input is ", dtype_name(input.dtype),
                " but output is ", dtype_name(output.dtype));
  const detail::CallKey key =
      call_key("reduce_scatter", {static_cast<int64_t>(op), static_cast<int64_t>(input.dtype)}, counts);
  return enqueue(key,
                 [&] { return concat(reduce_op_name(op), ", ", dtype_name(input.dtype), ", counts ", counts_text(key.counts)); },
                 std::move(keep),
                 [this, input, output, op, counts = std::move(counts)](Deadline d) {
                   if (total(counts) == 0) return;
                   communicator_->reduce_scatter(input, output, counts, backend_op(op), d);
                   if (divides_after(op)) divide_by_size(output);
                 }, input.device);
}

WorkPtr ProcessGroup::alltoall(const Tensor& input, const Tensor& output, std::source_location where) {
  CallSiteScope site(where);
  Buffer in = checked_buffer(input, "alltoall", "input");
  Buffer out = checked_buffer(output, "alltoall", "output");
  TESSERA_CHECK(in.count == out.count, "[alltoall] input has ", in.count, " elements but output has ", out.count);
  TESSERA_CHECK(in.count % size_ == 0, "[alltoall] ", in.count, " elements do not split into ", size_,
                " equal blocks");
  TESSERA_CHECK(in.dtype == out.dtype, "[alltoall] input is ", dtype_name(in.dtype), " but output is ",
                dtype_name(out.dtype));
  check_devices(in, out, "alltoall");
  return enqueue(call_key("alltoall", {static_cast<int64_t>(in.dtype), in.count}), [&] { return buffer_details(in); },
                 {input, output}, [this, in, out](Deadline d) {
    if (in.count > 0) communicator_->alltoall(in, out, d);
  }, in.device);
}

WorkPtr ProcessGroup::barrier(std::source_location where) {
  CallSiteScope site(where);
  return enqueue(call_key("barrier"), [] { return std::string(); }, {}, [this](Deadline d) {
    if (size_ > 1) communicator_->barrier(d);
  });
}

Tensor ProcessGroup::symmetric_zeros(const Shape& shape, DType dtype, std::source_location where) {
  CallSiteScope site(where);
  const int64_t count = shape_numel(shape);
  const size_t nbytes = static_cast<size_t>(count) * dtype_size(dtype);
  auto memory = std::make_shared<std::shared_ptr<void>>();
  enqueue(call_key("symmetric_zeros", {static_cast<int64_t>(dtype), count}),
          [&] { return concat(dtype_name(dtype), " x ", count); }, {},
          [this, nbytes, memory](Deadline d) {
            if (size_ > 1) *memory = communicator_->allocate_symmetric(nbytes, d);
          })
      ->wait();
  if (!*memory) return zeros(shape, dtype);
  void* data = memory->get();
  return view_of_storage(Storage::wrap(data, nbytes, cpu_device(), [memory] { memory->reset(); }), shape, 0, dtype);
}

void ProcessGroup::check_counts(const char* op, const std::vector<int64_t>& counts) const {
  TESSERA_CHECK(static_cast<int>(counts.size()) == size_, "[", op, "] ", counts.size(), " counts for a group of ",
                size_);
  for (int64_t c : counts) TESSERA_CHECK(c >= 0, "[", op, "] negative count ", c, " in ", counts_text(counts));
}

// ---- point to point -------------------------------------------------------------------------

WorkPtr ProcessGroup::send(const Tensor& tensor, int dst, int tag) {
  return post_transfer("send", checked_buffer(tensor, "send", "tensor"), dst, tag, {tensor});
}

WorkPtr ProcessGroup::recv(const Tensor& tensor, int src, int tag) {
  return post_transfer("recv", checked_buffer(tensor, "recv", "tensor"), src, tag, {tensor});
}

WorkPtr ProcessGroup::post_transfer(const char* op, Buffer data, int peer, int tag, std::vector<Tensor> keep) {
  bool is_send = std::string_view(op) == "send";
  check_rank(peer, op, is_send ? "destination" : "source");
  TESSERA_CHECK(peer != rank_, "[", op, "] rank ", rank_, " cannot ", op, is_send ? " to" : " from", " itself");
  TESSERA_CHECK(tag >= 0, "[", op, "] tag must be non-negative, got ", tag);
  std::string description =
      concat(op, is_send ? " to rank " : " from rank ", peer, " (tag ", tag, ", ", buffer_details(data), ")");
  {
    std::lock_guard lock(mu_);
    if (broken_) {
      auto work = std::make_shared<Work>(description);
      work->finish(with_context(broken_, concat("[", description, "] not run: the group failed earlier in ",
                                                broken_by_, ": "),
                                ""));
      return work;
    }
  }
  std::unique_ptr<PendingTransfer> pending =
      is_send ? communicator_->post_send(data, peer, tag) : communicator_->post_recv(data, peer, tag);
  auto transfer = std::make_unique<TransferKeepingTensors>(std::move(pending), std::move(keep));
  return std::make_shared<Work>(concat("[rank ", rank_, "] ", description), std::move(transfer),
                                detail::deadline_after(options_.timeout));
}

}  // namespace tessera::dist
