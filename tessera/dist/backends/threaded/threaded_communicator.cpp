#include "tessera/dist/backends/threaded/threaded_communicator.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::dist {

namespace {
// memcpy that accepts the null pointers of empty buffers (memcpy itself may not be given them).
void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}
}  // namespace

using tessera::detail::concat;

// Collectives are rounds: every rank deposits a snapshot of its input, waits until all have
// (phase 1), computes its own output from the snapshots, and waits until all have finished
// reading (phase 2) so that no snapshot is freed while a peer reads it.
class ThreadedWorld {
 public:
  explicit ThreadedWorld(int size) : size_(size), snapshots_(static_cast<size_t>(size)) {}
  int size() const { return size_; }

  // Deposits `bytes`, waits for everyone's; returns the snapshots (valid until finish_round).
  const std::vector<std::vector<char>>& exchange(int rank, const void* data, size_t bytes, const char* op,
                                                 Deadline deadline) {
    std::unique_lock lock(mu_);
    snapshots_[static_cast<size_t>(rank)].assign(static_cast<const char*>(data),
                                                 static_cast<const char*>(data) + bytes);
    arrive(lock, rank, op, deadline);
    return snapshots_;
  }
  void finish_round(int rank, const char* op, Deadline deadline) {
    std::unique_lock lock(mu_);
    arrive(lock, rank, op, deadline);
  }

  void send(int src, int dst, int tag, const void* data, size_t bytes) {
    std::lock_guard lock(mu_);
    mailboxes_[{src, dst, tag}].emplace_back(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    cv_.notify_all();
  }
  void recv(int src, int dst, int tag, void* data, size_t bytes, Deadline deadline) {
    std::unique_lock lock(mu_);
    auto& box = mailboxes_[{src, dst, tag}];
    if (!cv_.wait_until(lock, deadline, [&] { return !box.empty(); }))
      throw TimeoutError(concat("[threaded recv] rank ", dst, ": no message from rank ", src, " with tag ", tag,
                                " before the deadline"));
    std::vector<char> message = std::move(box.front());
    box.pop_front();
    TESSERA_CHECK(message.size() == bytes, "[threaded recv] rank ", dst, " expected ", bytes,
                  " bytes from rank ", src, " but the message has ", message.size());
    copy_bytes(data, message.data(), bytes);
  }

  // The world of the members' n-th split over `ranks`: the first member to ask creates it.
  std::shared_ptr<ThreadedWorld> subworld(const std::vector<int>& ranks, int caller) {
    std::lock_guard lock(mu_);
    int n = split_counts_[{ranks, caller}]++;
    auto& world = subworlds_[{ranks, n}];
    if (!world) world = std::make_shared<ThreadedWorld>(static_cast<int>(ranks.size()));
    return world;
  }

 private:
  // A generation-counted barrier whose timeout names the ranks still missing.
  void arrive(std::unique_lock<std::mutex>& lock, int rank, const char* op, Deadline deadline) {
    uint64_t generation = generation_;
    arrived_.push_back(rank);
    if (static_cast<int>(arrived_.size()) == size_) {
      arrived_.clear();
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_until(lock, deadline, [&] { return generation_ != generation; })) {
      std::vector<bool> here(static_cast<size_t>(size_), false);
      for (int r : arrived_) here[static_cast<size_t>(r)] = true;
      std::string missing;
      for (int r = 0; r < size_; ++r)
        if (!here[static_cast<size_t>(r)]) missing += concat(missing.empty() ? "" : ", ", r);
      throw TimeoutError(concat("[threaded ", op, "] rank ", rank, ": timed out waiting for rank(s) ", missing));
    }
  }

  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  std::vector<int> arrived_;
  std::vector<std::vector<char>> snapshots_;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<char>>> mailboxes_;
  std::map<std::pair<std::vector<int>, int>, int> split_counts_;
  std::map<std::pair<std::vector<int>, int>, std::shared_ptr<ThreadedWorld>> subworlds_;
};

namespace {

class DoneTransfer : public PendingTransfer {
 public:
  void wait(Deadline) override {}
};

class RecvTransfer : public PendingTransfer {
 public:
  RecvTransfer(std::shared_ptr<ThreadedWorld> world, Buffer data, int src, int dst, int tag)
      : world_(std::move(world)), data_(data), src_(src), dst_(dst), tag_(tag) {}
  void wait(Deadline deadline) override { world_->recv(src_, dst_, tag_, data_.data, data_.nbytes(), deadline); }

 private:
  std::shared_ptr<ThreadedWorld> world_;
  Buffer data_;
  int src_, dst_, tag_;
};

class ThreadedCommunicator : public Communicator {
 public:
  ThreadedCommunicator(std::shared_ptr<ThreadedWorld> world, int rank) : world_(std::move(world)), rank_(rank) {}
  const char* backend_name() const override { return "threaded"; }
  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }

  void allreduce(Buffer data, ReduceOp op, Deadline deadline) override {
    const auto& all = world_->exchange(rank_, data.data, data.nbytes(), "allreduce", deadline);
    copy_bytes(data.data, all[0].data(), data.nbytes());
    for (int r = 1; r < size(); ++r) reduce_into(data.data, all[static_cast<size_t>(r)].data(), data.count, data.dtype, op);
    world_->finish_round(rank_, "allreduce", deadline);
  }
  void broadcast(Buffer data, int root, Deadline deadline) override {
    const auto& all = world_->exchange(rank_, data.data, data.nbytes(), "broadcast", deadline);
    copy_bytes(data.data, all[static_cast<size_t>(root)].data(), data.nbytes());
    world_->finish_round(rank_, "broadcast", deadline);
  }
  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override {
    const auto& all = world_->exchange(rank_, data.data, data.nbytes(), "reduce", deadline);
    if (rank_ == root) {
      copy_bytes(data.data, all[0].data(), data.nbytes());
      for (int r = 1; r < size(); ++r)
        reduce_into(data.data, all[static_cast<size_t>(r)].data(), data.count, data.dtype, op);
    }
    world_->finish_round(rank_, "reduce", deadline);
  }
  void allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) override {
    const auto& all = world_->exchange(rank_, input.data, input.nbytes(), "allgather", deadline);
    char* out = static_cast<char*>(output.data);
    for (int r = 0; r < size(); ++r) {
      const auto& part = all[static_cast<size_t>(r)];
      copy_bytes(out, part.data(), part.size());
      out += part.size();
    }
    world_->finish_round(rank_, "allgather", deadline);
  }
  void reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op,
                      Deadline deadline) override {
    const auto& all = world_->exchange(rank_, input.data, input.nbytes(), "reduce_scatter", deadline);
    int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, int64_t{0});
    size_t at = static_cast<size_t>(offset) * dtype_size(input.dtype);
    copy_bytes(output.data, all[0].data() + at, output.nbytes());
    for (int r = 1; r < size(); ++r)
      reduce_into(output.data, all[static_cast<size_t>(r)].data() + at, output.count, output.dtype, op);
    world_->finish_round(rank_, "reduce_scatter", deadline);
  }
  void alltoall(Buffer input, Buffer output, Deadline deadline) override {
    const auto& all = world_->exchange(rank_, input.data, input.nbytes(), "alltoall", deadline);
    size_t block = input.nbytes() / static_cast<size_t>(size());
    for (int s = 0; s < size(); ++s)
      copy_bytes(static_cast<char*>(output.data) + static_cast<size_t>(s) * block,
                  all[static_cast<size_t>(s)].data() + static_cast<size_t>(rank_) * block, block);
    world_->finish_round(rank_, "alltoall", deadline);
  }
  void barrier(Deadline deadline) override { world_->finish_round(rank_, "barrier", deadline); }

  std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag) override {
    world_->send(rank_, peer, tag, data.data, data.nbytes());  // eager: the message is copied now
    return std::make_unique<DoneTransfer>();
  }
  std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag) override {
    return std::make_unique<RecvTransfer>(world_, data, peer, rank_, tag);
  }
  std::unique_ptr<Communicator> split(std::span<const int> ranks, std::shared_ptr<Store>, Milliseconds) override {
    std::vector<int> members(ranks.begin(), ranks.end());
    int index = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    return std::make_unique<ThreadedCommunicator>(world_->subworld(members, rank_), index);
  }

 private:
  std::shared_ptr<ThreadedWorld> world_;
  int rank_;
};

}  // namespace

std::shared_ptr<ThreadedWorld> make_threaded_world(int size) {
  TESSERA_CHECK(size >= 1, "[threaded] world size must be at least 1, got ", size);
  return std::make_shared<ThreadedWorld>(size);
}

std::unique_ptr<Communicator> make_threaded_communicator(std::shared_ptr<ThreadedWorld> world, int rank) {
  TESSERA_CHECK(rank >= 0 && rank < world->size(), "[threaded] rank ", rank, " is not in a world of ",
                world->size());
  return std::make_unique<ThreadedCommunicator>(std::move(world), rank);
}

}  // namespace tessera::dist
