// ProcessGroup: the collectives of a group of ranks, asynchronous, over any backend (c10d's
// ProcessGroup). Every call checks its arguments on the caller's thread (shapes, dtypes, ranks:
// ValueError at once, naming the op), then queues the operation and returns a Work handle.
// One worker thread runs the queue in order, so every rank runs its collectives in the order it
// issued them; send/recv bypass the queue (post at once, complete in Work::wait()). A thread that
// calls Work::wait() on an operation the worker has not started yet runs it (and any queued ahead
// of it) itself, one task at a time as the worker would: issue-then-wait, as a loss all-reduce is,
// then costs no hand-over between threads.
//
// Failure behaviour: each operation is bounded by the group's timeout, counted from when it starts
// running. When one fails (TimeoutError, or PeerFailureError for a dead peer), the error names the
// operation, its sequence number and the ranks that never arrived: a rank stuck in a collective for
// longer than a quarter of the timeout publishes "I am in #n" to the store (a watchdog, so healthy
// jobs send nothing), and the failing rank reads those reports. The group is then broken: later
// operations fail at once with the first error.
//
// The collective check (always on; TESSERA_COLLECTIVE_CHECK=0 turns it off): every collective
// records its fingerprint (sequence number, op, dtype, sizes, root, and the file:line that called
// it) in the flight recorder. The watchdog thread publishes the newest ones to the store about once
// a second, off the data path, and compares them with the next rank's: when one number holds two
// different calls, every rank's waiting operation fails within a few seconds with a ValueError
// naming both ranks' calls and call sites, instead of hanging until the timeout or returning a
// silently wrong result (process_group_check.cpp).
//
// Debug mode (TESSERA_DIST_DEBUG=1, or options.debug): before each collective every rank publishes
// its call (op, dtype, sizes, root) to the store and compares it with every other rank's; a
// mismatch is a ValueError listing each rank's call. It blocks each collective on a store round
// trip; the collective check above does not.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <thread>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/call_text.h"
#include "tessera/dist/communicator.h"
#include "tessera/dist/flight_recorder.h"
#include "tessera/dist/work.h"

namespace tessera::dist {

struct ProcessGroupOptions {
  Milliseconds timeout{300000};  // per operation, as torch.distributed's default of 30 minutes is too long
  bool debug = false;            // the call check described above; init_process_group reads TESSERA_DIST_DEBUG
  // > 0: the watchdog thread also publishes "heartbeat/<rank>" this often, off the data path, as
  // three lines: "<count> <busy_us> <in_flight> <seq> <op>", the call in flight ("allreduce #3 (sum,
  // float32 x 10)", or empty), and this rank's arrival times at its latest collectives ("<seq>:<unix
  // us> ..."). From them the elastic agent (tessera/elastic) tells a stalled process (SIGSTOP, a
  // frozen machine) from a slow one, names the collective the others wait in with its size, and
  // names a rank that arrives last at the collectives again and again (a straggler).
  // init_process_group reads TESSERA_HEARTBEAT_MS, which the elastic agent sets.
  Milliseconds heartbeat{0};
  // Where the heartbeats go, and as which rank: a live job's later groups (live_membership.h) beat
  // as their launch rank under the first group's prefix, where the agent watches. Null: the group's
  // own store, as its rank.
  std::shared_ptr<Store> heartbeat_store;
  int heartbeat_rank = -1;
  // The collective check described above; init_process_group reads TESSERA_COLLECTIVE_CHECK.
  bool collective_check = true;
  // After the check has failed a collective that is still stuck in the backend (which cannot be
  // interrupted), the group's destructor ends the process (exit status 1) instead of waiting for
  // the timeout, so the job's launcher sees the failure at once. init_process_group sets it; ranks
  // that are threads of one test process do not.
  bool exit_when_stuck_after_mismatch = false;
  // Collectives the flight record keeps (the newest). tessera plan's dry groups keep a whole run's.
  size_t flight_entries = 512;
  // Whether the group writes its record to flight_recorder_dir() when a collective is stuck or fails
  // (tessera plan's dry groups do not: they would overwrite the real run's records beside them).
  bool dump_flight_records = true;
  // After a collective fails, wait up to three watchdog intervals (3 s at most) for the other ranks'
  // "I am in #n" reports, to name the ranks that never arrived. A live job's groups (whose
  // survivors regroup at once, live_membership.h) take one look at the store instead.
  bool wait_for_failure_reports = true;
};

class ProcessGroup;
// A group's name (ProcessGroup::name) from its global ranks and lineage (process_group_flight.cpp).
std::string flight_group_name(const std::vector<int>& global_ranks, const std::string& lineage);
// The groups SIGUSR2 makes write their flight record (process_group_flight.cpp).
void register_flight_group(const ProcessGroup* group);
void unregister_flight_group(const ProcessGroup* group);

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup>, public InlineRunner {
 public:
  // `store` is private to this group (a PrefixStore) and reachable by all its ranks; `global_ranks`
  // maps this group's ranks to the world's (empty: the identity).
  // `lineage`: how the group was made ("" for a world; new_group passes its parent's name and the
  // split's number), so that two groups of the same ranks (a world of 2 and its pipeline's group of
  // the same 2) keep apart in flight records.
  ProcessGroup(std::unique_ptr<Communicator> communicator, std::shared_ptr<Store> store,
               ProcessGroupOptions options, std::vector<int> global_ranks = {}, const std::string& lineage = "");
  // Waits for the queued operations (each bounded by the timeout), then stops the threads.
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // This rank leaves the group for good (a live job's survivors, before they form the next one):
  // every wait of its operations ends, and so do its peers' waits for it (PeerFailureError): shm marks
  // it departed in the shared segment, tcp shuts its connections down. Thread-safe.
  void leave() {
    if (communicator_->abortable()) communicator_->leave();
  }
  const char* backend_name() const { return communicator_->backend_name(); }
  // Whether the backend takes buffers on `device` (every backend takes the CPU's).
  bool takes(Device device) const { return communicator_->takes(device); }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  // The same on every member, and different for every group of a job: "g<size>-<first>to<last>-<hash>".
  const std::string& name() const { return name_; }

  // The flight record (flight_recorder.h): this group's last collectives as JSON, with `reason`.
  nlohmann::json flight_record(const std::string& reason) const;
  // Writes it to flight_recorder_dir()/rank-<global rank>-<group>.json (nothing without a directory);
  // never throws (a failed write is reported on stderr).
  void dump_flight_record(const std::string& reason) const;
  // Every live group of this process writes its record (SIGUSR2).
  static void dump_all_flight_records(const std::string& reason);
  // Every live group's record, as that writes them (tessera plan reads its dry run's ones so; a
  // real run's come from the files).
  static std::vector<nlohmann::json> all_flight_records(const std::string& reason);
  Milliseconds timeout() const { return options_.timeout; }
  // Seconds the group's worker thread has spent running operations (the communication time that
  // DDP's overlap report compares with the time backward waited for it).
  double busy_seconds() const { return static_cast<double>(busy_ns_.load()) * 1e-9; }
  // Collectives issued so far; the next one gets this number.
  uint64_t sequence_number() const { return next_sequence_.load(); }
  // When this rank issued (arrived at) each of its latest collectives: (sequence, Unix time in
  // microseconds), oldest first, at most kArrivalsKept.
  static constexpr size_t kArrivalsKept = 32;
  std::vector<std::pair<uint64_t, int64_t>> recent_arrivals() const;

  // Tensors must be contiguous CPU tensors; in-place ops overwrite `tensor`. The tensors are kept
  // alive until the operation finishes; do not read or write them before wait().
  WorkPtr allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum, std::source_location where = std::source_location::current());
  WorkPtr broadcast(const Tensor& tensor, int root, std::source_location where = std::source_location::current());
  WorkPtr reduce(const Tensor& tensor, ReduceOp op, int root, std::source_location where = std::source_location::current());  // result on root only
  // output.numel() == size() * input.numel().
  WorkPtr allgather(const Tensor& input, const Tensor& output, std::source_location where = std::source_location::current());
  // Unequal sizes: counts[r] elements from rank r; input.numel() == counts[rank()], output.numel()
  // == sum(counts).
  WorkPtr allgather(const Tensor& input, const Tensor& output, std::vector<int64_t> counts,
                    std::source_location where = std::source_location::current());
  // input.numel() == size() * output.numel(); rank r gets the reduction of block r.
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::Sum,
                         std::source_location where = std::source_location::current());
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, std::vector<int64_t> counts,
                         ReduceOp op = ReduceOp::Sum, std::source_location where = std::source_location::current());
  // input and output: size() equal blocks; block j of input goes to rank j.
  WorkPtr alltoall(const Tensor& input, const Tensor& output, std::source_location where = std::source_location::current());
  WorkPtr send(const Tensor& tensor, int dst, int tag = 0);
  WorkPtr recv(const Tensor& tensor, int src, int tag = 0);
  WorkPtr barrier(std::source_location where = std::source_location::current());
  // Blocking forms (PyTorch's async_op=False): finished when they return; errors are thrown here.
  // Over a backend that runs an operation on the thread waiting for it (shm, tcp) they wake no
  // other thread, so a small one costs the exchange alone.
  void blocking_allreduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum,
                          std::source_location where = std::source_location::current());
  void blocking_broadcast(const Tensor& tensor, int root, std::source_location where = std::source_location::current());
  void blocking_barrier(std::source_location where = std::source_location::current());

  // The same over raw buffers (DDP's flat buckets); the caller keeps them alive until wait().
  WorkPtr allreduce(Buffer data, ReduceOp op = ReduceOp::Sum, std::source_location where = std::source_location::current());
  WorkPtr broadcast(Buffer data, int root, std::source_location where = std::source_location::current());
  WorkPtr allgather(Buffer input, Buffer output, std::vector<int64_t> counts, std::source_location where = std::source_location::current());
  WorkPtr reduce_scatter(Buffer input, Buffer output, std::vector<int64_t> counts, ReduceOp op,
                         std::source_location where = std::source_location::current());

  // Zeroed memory of `shape` that the backend allreduces without copies through its own buffers
  // (Communicator::allocate_symmetric: shm maps every rank's buffer in every peer), as NCCL's
  // registered buffers; ordinary zeros where the backend has none. Collective: every rank calls it
  // with the same shape and dtype, in the same order as its other collectives. An allreduce of the
  // whole tensor (or of one slice of it at the same place on every rank) then takes the fast path;
  // DDP allocates its gradient buckets here.
  Tensor symmetric_zeros(const Shape& shape, DType dtype = DType::Float32,
                         std::source_location where = std::source_location::current());

  // A subgroup over `ranks` (this group's rank numbers, any order, no repeats). Every rank of this
  // group calls it, in the same order (as torch.distributed.new_group); members get the new
  // group, the others nullptr.
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks);

  // Work::wait()'s inline run: while no task runs, runs the queued tasks up to and including `work`'s.
  void run_queued_through(const Work* work) override;

 private:
  struct Task {
    uint64_t sequence = 0;
    // op, signature (what debug mode and the collective check compare across ranks), call site
    CallTextPtr call;
    std::function<void(Deadline)> body;
    WorkPtr work;
    bool collective = true;  // false for new_group's split, which has no sequence number
    std::vector<Tensor> keep;  // alive until the task has run
    // The buffers' device, and for a device backend's stream the point of the caller's compute
    // stream the operation must run after (recorded when it was issued).
    Device device;
    std::shared_ptr<Event> ready;
    std::string description() const { return call->description(sequence); }  // "allreduce #3 (sum, float32 x 10)"
  };

  // Queues a collective over buffers of `device`; `key` and `details` describe it (the text is
  // built once per distinct call).
  WorkPtr enqueue(const detail::CallKey& key, detail::DetailsText details, std::vector<Tensor> keep,
                  std::function<void(Deadline)> body, Device device = cpu_device());
  // The shared text of the call `key` describes, built with `details` the first time (call_text.h).
  // Under mu_.
  CallTextPtr intern_call(const detail::CallKey& key, detail::DetailsText details);
  WorkPtr allreduce_buffer(Buffer data, ReduceOp op, std::vector<Tensor> keep);
  WorkPtr broadcast_buffer(Buffer data, int root, std::vector<Tensor> keep);
  WorkPtr allgather_buffer(Buffer input, Buffer output, std::vector<int64_t> counts, std::vector<Tensor> keep);
  WorkPtr reduce_scatter_buffer(Buffer input, Buffer output, std::vector<int64_t> counts, ReduceOp op,
                                std::vector<Tensor> keep);
  void check_counts(const char* op, const std::vector<int64_t>& counts) const;
  // The backend takes the buffer's device (and an input's and output's are one device).
  void check_device(const Buffer& data, const char* op) const;
  void check_devices(const Buffer& input, const Buffer& output, const char* op) const;
  void divide_by_size(Buffer data) const;
  ReduceOp backend_op(ReduceOp op) const;  // what the communicator is asked for
  bool divides_after(ReduceOp op) const;   // whether its result still needs dividing by the size
  // `key` and `details`: the call to intern as task.call (under the queue's lock); null when the
  // task comes with its call.
  WorkPtr enqueue_task(Task task, const detail::CallKey* key = nullptr, const detail::DetailsText* details = nullptr);
  void run_worker();
  // Runs the task at the head of the queue (lock held on entry and on return; released while it runs).
  void run_front(std::unique_lock<std::mutex>& lock);
  void run_watchdog();
  void run_task(Task& task);
  void check_same_call(const Task& task, Deadline deadline);
  // The collective check (process_group_check.cpp), run by the watchdog about once a second.
  void check_fingerprints(std::unique_lock<std::mutex>& lock);
  void fail_mismatched(std::unique_lock<std::mutex>& lock, const std::string& message);
  void wait_for_ranks_leaving_after_mismatch();
  std::string describe_stragglers(const Task& task);
  static std::string this_host();  // the hostname, for reports
  Buffer checked_buffer(const Tensor& tensor, const char* op, const char* name) const;
  void check_rank(int r, const char* op, const char* what) const;
  WorkPtr post_transfer(const char* op, Buffer data, int peer, int tag, std::vector<Tensor> keep);

  std::unique_ptr<Communicator> communicator_;
  std::shared_ptr<Store> store_;
  ProcessGroupOptions options_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> global_ranks_;
  std::string name_;
  std::atomic<uint64_t> next_sequence_{0};
  std::atomic<int64_t> busy_ns_{0};
  uint64_t groups_created_ = 0;

  mutable std::mutex mu_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  bool running_ = false;  // a task runs, on the worker or on a waiting thread
  std::exception_ptr broken_;  // the first failure; later operations rethrow it
  std::string broken_by_;
  // The collective now running, for the watchdog (none while in_flight_call_ is null).
  uint64_t in_flight_sequence_ = 0;
  CallTextPtr in_flight_call_;
  WorkPtr in_flight_work_;      // failed early by the collective check
  // Under mu_; before the task's Work finishes, so that a waiter that goes on (and destroys the
  // group, whose destructor reads it) sees the collective over.
  void clear_in_flight() {
    in_flight_call_.reset();
    in_flight_work_.reset();
  }
  uint64_t published_through_ = UINT64_MAX;  // the newest sequence the check has published
  bool mismatched_ = false;     // the check found two calls under one number
  std::deque<std::pair<uint64_t, int64_t>> arrivals_;  // recent_arrivals()
  FlightRecorder flight_;
  // intern_call's texts, newest at the back; at most kCallTextsKept, the oldest dropped first.
  struct InternedCall {
    detail::CallKey key;  // its counts span points into `counts`
    std::vector<int64_t> counts;
    CallTextPtr text;
  };
  static constexpr size_t kCallTextsKept = 64;
  std::deque<InternedCall> call_texts_;  // under mu_
  std::condition_variable watchdog_cv_;
  int worker_priority_ = 0;  // nice levels worker_ runs above the process (TESSERA_COMM_PRIORITY)
  std::thread worker_;
  std::thread watchdog_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

}  // namespace tessera::dist
