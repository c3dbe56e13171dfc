#include "tessera/dist/backends/dry/dry_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/storage.h"

namespace tessera::dist {

using tessera::detail::concat;

void DryLog::set_phase(std::string phase) {
  std::lock_guard lock(mu_);
  phase_ = std::move(phase);
}

void DryLog::add(DryCall call) {
  std::lock_guard lock(mu_);
  call.phase = phase_;
  calls_.push_back(std::move(call));
}

std::vector<DryCall> DryLog::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

void DryLog::add_symmetric(SymmetricBuffer buffer, const std::shared_ptr<void>& memory) {
  std::lock_guard lock(mu_);
  symmetric_.emplace_back(buffer, memory);
}

std::vector<DryLog::SymmetricBuffer> DryLog::symmetric() const {
  std::lock_guard lock(mu_);
  std::vector<SymmetricBuffer> alive;
  for (const auto& [buffer, memory] : symmetric_)
    if (!memory.expired()) alive.push_back(buffer);
  return alive;
}

void DryMailbox::post(const std::string& key, const Buffer& data) {
  std::lock_guard lock(mu_);
  if (sealed_) return;
  Message m;
  m.bytes = data.nbytes();
  if (m.bytes <= kKeptBytes) m.payload.assign(static_cast<const char*>(data.data), static_cast<const char*>(data.data) + m.bytes);
  messages_[key].push_back(std::move(m));
  arrived_.notify_all();
}

void DryMailbox::wait_for(std::unique_lock<std::mutex>& lock, const std::string& key, int sender, Deadline deadline,
                          const std::function<bool()>& there) {
  while (!there()) {
    if (!aborted_.empty()) throw Error(concat("[dry] no message ", key, ": ", aborted_));
    if (finished_.count(sender))
      throw ValueError(concat("[dry] rank ", sender, " finished its run without sending ", key,
                              ": the ranks' calls do not match"));
    if (arrived_.wait_until(lock, deadline) == std::cv_status::timeout && !there())
      throw TimeoutError(concat("[dry] message ", key, " from rank ", sender, " never came"));
  }
}

void DryMailbox::finished(int rank) {
  std::lock_guard lock(mu_);
  finished_.insert(rank);
  arrived_.notify_all();
}

void DryMailbox::take(const std::string& key, int sender, Buffer data, bool wait, Deadline deadline) {
  std::unique_lock lock(mu_);
  size_t& next = read_[key];
  auto there = [&] {
    auto it = messages_.find(key);
    return it != messages_.end() && next < it->second.size();
  };
  if (wait) wait_for(lock, key, sender, deadline, there);
  if (!there()) {
    if (data.count > 0) std::memset(data.data, 0, data.nbytes());
    return;
  }
  const Message& m = messages_[key][next++];
  TESSERA_CHECK(m.bytes == data.nbytes(), "[dry] message ", key, " holds ", m.bytes, " bytes; the receiver expects ",
                data.nbytes());
  if (m.bytes == 0) return;
  if (m.payload.empty()) std::memset(data.data, 0, m.bytes);
  else std::memcpy(data.data, m.payload.data(), m.bytes);
}

void DryMailbox::publish(const std::string& key, const void* data, size_t bytes) {
  std::lock_guard lock(mu_);
  if (sealed_) return;
  published_[key].assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  arrived_.notify_all();
}

std::optional<std::vector<char>> DryMailbox::read(const std::string& key, int sender, bool wait, Deadline deadline) {
  std::unique_lock lock(mu_);
  auto there = [&] { return published_.count(key) > 0; };
  if (!wait && !there()) return std::nullopt;
  wait_for(lock, key, sender, deadline, there);
  return published_[key];
}

void DryMailbox::seal() {
  std::lock_guard lock(mu_);
  sealed_ = true;
}

void DryMailbox::rewind() {
  std::lock_guard lock(mu_);
  read_.clear();
}

void DryMailbox::abort(const std::string& why) {
  std::lock_guard lock(mu_);
  if (aborted_.empty()) aborted_ = why;
  arrived_.notify_all();
}

namespace {

class DoneTransfer : public PendingTransfer {
 public:
  void wait(Deadline) override {}
};

// data = factor × data, by doubling and adding with the reduction kernel every backend shares, so
// every dtype works as in a real sum of `factor` equal parts (log2(factor) passes). Only for small
// buffers (counts, norms, flags: what a strategy may decide by): a large payload's values are not
// what a plan is about, and passes over it would be timed as the rank's compute (36 all-reduces of
// 512 KiB a step cost a tensor-parallel GPT rank 5 ms of its 17 here).
void multiply_in_place(Buffer data, int64_t factor) {
  if (factor <= 1 || data.count == 0 || data.nbytes() > DryMailbox::kKeptBytes) return;
  std::vector<char> once(data.nbytes());
  std::memcpy(once.data(), data.data, data.nbytes());
  int top = 62;
  while (((factor >> top) & 1) == 0) --top;
  for (int bit = top - 1; bit >= 0; --bit) {
    reduce_into(data.data, data.data, data.count, data.dtype, ReduceOp::Sum);
    if ((factor >> bit) & 1) reduce_into(data.data, once.data(), data.count, data.dtype, ReduceOp::Sum);
  }
}

// A receive: the message is taken from the mailbox when the receiver waits for it.
class MailboxTransfer : public PendingTransfer {
 public:
  MailboxTransfer(std::shared_ptr<DryMailbox> mailbox, std::string key, int sender, Buffer data, bool wait)
      : mailbox_(std::move(mailbox)), key_(std::move(key)), sender_(sender), data_(data), wait_(wait) {}
  void wait(Deadline deadline) override { mailbox_->take(key_, sender_, data_, wait_, deadline); }

 private:
  std::shared_ptr<DryMailbox> mailbox_;
  std::string key_;
  int sender_;
  Buffer data_;
  bool wait_;
};

// What the ranks of one dry world share: the log of this rank's calls and the mailbox.
struct DryWorld {
  std::shared_ptr<DryLog> log;
  std::shared_ptr<DryMailbox> mailbox;
  bool wait_for_messages = false;
  int ranks_per_host = 0;  // 0: every rank on one host
};

class DryCommunicator : public Communicator {
 public:
  // `lineage`: the world's "w", a split's its parent's and its number ("w/0"), so that two groups of
  // the same ranks keep their messages apart.
  DryCommunicator(int rank, std::vector<int> global_ranks, DryWorld world, std::string lineage)
      : rank_(rank), global_ranks_(std::move(global_ranks)), world_(std::move(world)), log_(world_.log),
        lineage_(std::move(lineage)) {}

  const char* backend_name() const override { return "dry"; }
  // So that the process group runs each call on the thread that waits for it, as it does over shm
  // and tcp (abortable backends): otherwise every blocking collective would cost two thread
  // hand-offs that a real job does not pay (72 a step cost a tensor-parallel GPT rank 4-5 ms of its 17).
  // Abort ends the waits of the ranks running at once (the only waits there are).
  bool abortable() const override { return true; }
  void abort() override { world_.mailbox->abort("the process group was aborted"); }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_ranks_.size()); }
  bool reduces_average() const override { return true; }

  void allreduce(Buffer data, ReduceOp op, Deadline deadline) override {
    record("allreduce", data.dtype, data.count);
    if (small_exchange(data, data, deadline, [&](const Inputs& in) { reduce_inputs(in, 0, data, op); })) return;
    if (op == ReduceOp::Sum) multiply_in_place(data, size());
  }
  void broadcast(Buffer data, int root, Deadline deadline) override {
    record("broadcast", data.dtype, data.count, root);
    small_exchange(data, data, deadline, [&](const Inputs& in) { copy_part(in, root, 0, data); });
  }
  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override {
    record("reduce", data.dtype, data.count, root);
    if (small_exchange(data, data, deadline, [&](const Inputs& in) { reduce_inputs(in, 0, data, op); })) return;
    if (op == ReduceOp::Sum) multiply_in_place(data, size());
  }
  void allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) override {
    record("allgather", output.dtype, output.count);
    if (small_exchange(input, output, deadline, [&](const Inputs& in) {
          int64_t at = 0;
          for (int r = 0; r < size(); ++r) {
            copy_part(in, r, 0, output.slice(at, counts[static_cast<size_t>(r)]));
            at += counts[static_cast<size_t>(r)];
          }
        }))
      return;
    // Every peer's part is this rank's (as much of it as the part holds; zeros past it).
    const size_t element = dtype_size(input.dtype);
    char* out = static_cast<char*>(output.data);
    for (int64_t part : counts) {
      const int64_t copied = std::min(part, input.count);
      if (copied > 0) std::memcpy(out, input.data, static_cast<size_t>(copied) * element);
      if (part > copied) std::memset(out + copied * static_cast<int64_t>(element), 0, static_cast<size_t>(part - copied) * element);
      out += part * static_cast<int64_t>(element);
    }
  }
  void reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op, Deadline deadline) override {
    record("reduce_scatter", input.dtype, input.count);
    const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, int64_t{0});
    if (small_exchange(input, output, deadline, [&](const Inputs& in) { reduce_inputs(in, offset, output, op); })) return;
    if (output.count > 0)
      std::memcpy(output.data, static_cast<char*>(input.data) + offset * static_cast<int64_t>(dtype_size(input.dtype)),
                  output.nbytes());
    if (op == ReduceOp::Sum) multiply_in_place(output, size());
  }
  void alltoall(Buffer input, Buffer output, Deadline deadline) override {
    record("alltoall", input.dtype, input.count);
    const int64_t per_rank = input.count / size();
    if (small_exchange(input, output, deadline, [&](const Inputs& in) {
          for (int r = 0; r < size(); ++r) copy_part(in, r, rank_ * per_rank, output.slice(r * per_rank, per_rank));
        }))
      return;
    // Block r comes from rank r, which (being this rank) sends this rank's own block.
    const size_t block = input.nbytes() / static_cast<size_t>(size());
    const char* own = static_cast<const char*>(input.data) + static_cast<size_t>(rank_) * block;
    for (int r = 0; r < size(); ++r) std::memmove(static_cast<char*>(output.data) + static_cast<size_t>(r) * block, own, block);
  }
  void barrier(Deadline) override { record("barrier", DType::Float32, 0); }

  std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag) override {
    record("send", data.dtype, data.count, peer);
    world_.mailbox->post(message_key(rank_, peer, tag), data);
    return std::make_unique<DoneTransfer>();
  }
  std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag) override {
    record("recv", data.dtype, data.count, peer);
    return std::make_unique<MailboxTransfer>(world_.mailbox, message_key(peer, rank_, tag),
                                             global_ranks_[static_cast<size_t>(peer)], data, world_.wait_for_messages);
  }

  std::shared_ptr<void> allocate_symmetric(size_t bytes, Deadline) override {
    if (one_host()) {  // shared memory, as shm maps it: not the tensor allocator's
      std::shared_ptr<void> memory(std::calloc(std::max<size_t>(bytes, 1), 1), std::free);
      TESSERA_CHECK(memory != nullptr, "[dry] could not allocate ", bytes, " bytes of symmetric memory");
      log_->add_symmetric({memory.get(), bytes, true}, memory);
      return memory;
    }
    std::shared_ptr<Storage> storage = Storage::allocate(bytes, cpu_device());
    if (bytes > 0) std::memset(storage->data(), 0, bytes);
    std::shared_ptr<void> memory(storage, storage->data());
    log_->add_symmetric({storage->data(), bytes, false}, memory);
    return memory;
  }

  std::unique_ptr<Communicator> split(std::span<const int> ranks, std::shared_ptr<Store>, Milliseconds) override {
    std::vector<int> members;
    for (int r : ranks) members.push_back(global_ranks_[static_cast<size_t>(r)]);
    const int index = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin());
    TESSERA_ASSERT(index < static_cast<int>(ranks.size()), "[dry] split without this rank");
    return std::make_unique<DryCommunicator>(index, std::move(members), world_, concat(lineage_, "/", splits_++));
  }

 private:
  // `peer`: a rank of this group (translated to the world's), or -1.
  void record(const char* op, DType dtype, int64_t elements, int peer = -1) {
    log_->add(DryCall{"", op, dtype, elements, global_ranks_,
                      peer < 0 ? -1 : global_ranks_[static_cast<size_t>(peer)]});
  }

  using Inputs = std::vector<std::vector<char>>;  // every member's input, by rank in the group

  // A small collective (at most DryMailbox::kKeptBytes in or out) gets its exact result: computed by
  // `exact` from every member's input where the ranks run at once (and kept for this rank), taken
  // from what was kept where it runs alone. Returns false where neither applies (dry semantics).
  template <typename Exact>
  bool small_exchange(Buffer input, Buffer output, Deadline deadline, Exact exact) {
    const uint64_t number = collectives_++;  // every collective, so that both runs number them alike
    if (std::max(input.nbytes(), output.nbytes()) * static_cast<size_t>(size()) > DryMailbox::kKeptBytes ||
        size() == 1)
      return false;
    const std::string id = concat(group_text(), " #", number);
    const int me = global_ranks_[static_cast<size_t>(rank_)];
    if (!world_.wait_for_messages) {
      std::optional<std::vector<char>> kept = world_.mailbox->read(concat(id, " result of ", me), me, false, deadline);
      if (!kept || kept->size() != output.nbytes()) return false;
      if (!kept->empty()) std::memcpy(output.data, kept->data(), kept->size());
      return true;
    }
    world_.mailbox->publish(concat(id, " from ", me), input.data, input.nbytes());
    Inputs inputs;
    for (int r : global_ranks_) inputs.push_back(*world_.mailbox->read(concat(id, " from ", r), r, true, deadline));
    exact(inputs);
    world_.mailbox->publish(concat(id, " result of ", me), output.data, output.nbytes());
    return true;
  }

  // out = the reduction over the members of their inputs' elements [offset, offset + out.count).
  void reduce_inputs(const Inputs& in, int64_t offset, Buffer out, ReduceOp op) const {
    if (out.count == 0) return;
    const size_t element = dtype_size(out.dtype), at = static_cast<size_t>(offset) * element;
    std::vector<char> result(in[0].begin() + static_cast<std::ptrdiff_t>(at),
                             in[0].begin() + static_cast<std::ptrdiff_t>(at + out.nbytes()));
    const ReduceOp each = op == ReduceOp::Avg ? ReduceOp::Sum : op;
    for (size_t r = 1; r < in.size(); ++r) reduce_into(result.data(), in[r].data() + at, out.count, out.dtype, each);
    std::memcpy(out.data, result.data(), out.nbytes());
    if (op == ReduceOp::Avg) divide_in_place(out, size());
  }

  // out = member `from`'s input elements [offset, offset + out.count).
  static void copy_part(const Inputs& in, int from, int64_t offset, Buffer out) {
    if (out.count == 0) return;
    std::memcpy(out.data, in[static_cast<size_t>(from)].data() + offset * static_cast<int64_t>(dtype_size(out.dtype)),
                out.nbytes());
  }

  std::string group_text() const {
    std::string group;
    for (int r : global_ranks_) group += (group.empty() ? "" : ",") + std::to_string(r);
    return concat("group ", lineage_, " of ", group);
  }

  bool one_host() const {
    if (world_.ranks_per_host <= 0) return true;
    for (int r : global_ranks_)
      if (r / world_.ranks_per_host != global_ranks_.front() / world_.ranks_per_host) return false;
    return true;
  }

  // "group 0,2 from 0 to 2 tag 7" (global ranks).
  std::string message_key(int from, int to, int tag) const {
    return concat(group_text(), " from ", global_ranks_[static_cast<size_t>(from)], " to ",
                  global_ranks_[static_cast<size_t>(to)], " tag ", tag);
  }

  int rank_;
  std::vector<int> global_ranks_;
  DryWorld world_;
  std::shared_ptr<DryLog> log_;
  std::string lineage_;
  uint64_t collectives_ = 0, splits_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_dry_communicator(int rank, int size, std::shared_ptr<DryLog> log,
                                                    std::shared_ptr<DryMailbox> mailbox, bool wait_for_messages,
                                                    int ranks_per_host) {
  TESSERA_CHECK(size >= 1 && rank >= 0 && rank < size, "[dry] rank ", rank, " of a world of ", size);
  std::vector<int> world(static_cast<size_t>(size));
  std::iota(world.begin(), world.end(), 0);
  return std::make_unique<DryCommunicator>(rank, std::move(world),
                                           DryWorld{std::move(log), std::move(mailbox), wait_for_messages, ranks_per_host},
                                           "w");
}

}  // namespace tessera::dist
