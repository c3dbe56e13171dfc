// The mpi backend: the MPI library's collectives over a private duplicate of MPI_COMM_WORLD (or a
// subgroup of it). Every operation is posted nonblocking and completed by wait_for_request, so that
// each call returns by its deadline, as the Communicator contract requires, where MPI's blocking
// calls would wait forever for a rank that never comes.
//
// Nonblocking collectives cannot be cancelled (MPI 3.0, section 5.12), so after a timeout the
// request stays pending: the communicator is not used again (the ProcessGroup is broken) and the
// process aborts the job at exit rather than hang in MPI_Finalize (mark_mpi_unfinishable).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/backends/backend.h"
#include "tessera/dist/backends/mpi/mpi_job.h"
#include "tessera/dist/backends/mpi/mpi_runtime.h"
#include "tessera/dist/backends/mpi/mpi_transfer.h"
#include "tessera/dist/backends/mpi/mpi_types.h"

namespace tessera::dist {

namespace {

using detail::Clock;
using detail::MpiLock;
using tessera::detail::concat;

// Elements per MPI call for the in-place ops, which can be cut into pieces: MPI counts are int.
constexpr int64_t kMaxChunk = int64_t{1} << 30;
// MPI_Comm_create_group's tag. One value is enough: members of overlapping subgroups create them in
// the same order, and the tag only separates concurrent creations among the same ranks.
constexpr int kSplitTag = 0x5e17;

bool overlaps(const Buffer& a, const Buffer& b) {
  auto begin_a = static_cast<const char*>(a.data), begin_b = static_cast<const char*>(b.data);
  return a.nbytes() > 0 && b.nbytes() > 0 && begin_a < begin_b + b.nbytes() && begin_b < begin_a + a.nbytes();
}

// A private copy of `input` when MPI would otherwise read it while writing `output` over it
// (aliased send and receive buffers are erroneous in MPI).
const void* send_buffer(const Buffer& input, const Buffer& output, std::vector<char>& staging) {
  if (!overlaps(input, output)) return input.data;
  staging.resize(input.nbytes());
  std::memcpy(staging.data(), input.data, input.nbytes());
  return staging.data();
}

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm`.
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MpiLock lock;
    // Errors come back as codes and become exceptions, instead of MPI aborting the job.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || failed_.load()) return;  // after a timeout a request may still use comm_
    MpiLock lock;
    MPI_Comm_free(&comm_);
  }

  const char* backend_name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce(Buffer data, ReduceOp op, Deadline deadline) override {
    const Clock::time_point start = Clock::now();
    MPI_Datatype type = detail::mpi_datatype(data.dtype);
    MPI_Op mpi_op = detail::mpi_op(data.dtype, op);
    for (int64_t offset = 0; offset < data.count; offset += kMaxChunk) {
      Buffer part = data.slice(offset, std::min(kMaxChunk, data.count - offset));
      run("allreduce", deadline, start, [&](MPI_Request* request) {
        return MPI_Iallreduce(MPI_IN_PLACE, part.data, static_cast<int>(part.count), type, mpi_op, comm_, request);
      });
    }
  }

  void broadcast(Buffer data, int root, Deadline deadline) override {
    const Clock::time_point start = Clock::now();
    MPI_Datatype type = detail::mpi_datatype(data.dtype);
    for (int64_t offset = 0; offset < data.count; offset += kMaxChunk) {
      Buffer part = data.slice(offset, std::min(kMaxChunk, data.count - offset));
      run("broadcast", deadline, start, [&](MPI_Request* request) {
        return MPI_Ibcast(part.data, static_cast<int>(part.count), type, root, comm_, request);
      });
    }
  }

  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override {
    const Clock::time_point start = Clock::now();
    MPI_Datatype type = detail::mpi_datatype(data.dtype);
    MPI_Op mpi_op = detail::mpi_op(data.dtype, op);
    for (int64_t offset = 0; offset < data.count; offset += kMaxChunk) {
      Buffer part = data.slice(offset, std::min(kMaxChunk, data.count - offset));
      int count = static_cast<int>(part.count);
      run("reduce", deadline, start, [&](MPI_Request* request) {
        if (rank_ == root) return MPI_Ireduce(MPI_IN_PLACE, part.data, count, type, mpi_op, root, comm_, request);
        return MPI_Ireduce(part.data, nullptr, count, type, mpi_op, root, comm_, request);
      });
    }
  }

  void allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) override {
    const Clock::time_point start = Clock::now();
    std::vector<int> displacements;
    std::vector<int> mpi_counts = checked_counts("allgather", counts, &displacements);
    MPI_Datatype type = detail::mpi_datatype(input.dtype);
    Buffer own_slot = output.slice(displacements[static_cast<size_t>(rank_)], input.count);
    std::vector<char> staging;
    const void* send = own_slot.data == input.data ? MPI_IN_PLACE : send_buffer(input, output, staging);
    run("allgather", deadline, start, [&](MPI_Request* request) {
      return MPI_Iallgatherv(send, static_cast<int>(input.count), type, output.data, mpi_counts.data(),
                             displacements.data(), type, comm_, request);
    });
  }

  void reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op,
                      Deadline deadline) override {
    const Clock::time_point start = Clock::now();
    std::vector<int> displacements;
    std::vector<int> mpi_counts = checked_counts("reduce_scatter", counts, &displacements);
    MPI_Datatype type = detail::mpi_datatype(input.dtype);
    MPI_Op mpi_op = detail::mpi_op(input.dtype, op);
    std::vector<char> staging;
    const void* send = send_buffer(input, output, staging);
    bool equal = std::all_of(mpi_counts.begin(), mpi_counts.end(), [&](int c) { return c == mpi_counts[0]; });
    run("reduce_scatter", deadline, start, [&](MPI_Request* request) {
      // The block form lets MPI pick its equal-block algorithms (recursive halving and the like).
      if (equal) return MPI_Ireduce_scatter_block(send, output.data, mpi_counts[0], type, mpi_op, comm_, request);
      return MPI_Ireduce_scatter(send, output.data, mpi_counts.data(), type, mpi_op, comm_, request);
    });
  }

  void alltoall(Buffer input, Buffer output, Deadline deadline) override {
    const Clock::time_point start = Clock::now();
    TESSERA_CHECK(input.count == output.count && input.count % size_ == 0, "[mpi alltoall] rank ", rank_,
                  ": input and output must hold ", size_, " equal blocks; got ", input.count, " and ", output.count,
                  " elements");
    int block = checked_count("alltoall", input.count / size_);
    MPI_Datatype type = detail::mpi_datatype(input.dtype);
    std::vector<char> staging;
    const void* send = send_buffer(input, output, staging);
    run("alltoall", deadline, start, [&](MPI_Request* request) {
      return MPI_Ialltoall(send, block, type, output.data, block, type, comm_, request);
    });
  }

  void barrier(Deadline deadline) override {
    run("barrier", deadline, Clock::now(), [&](MPI_Request* request) { return MPI_Ibarrier(comm_, request); });
  }

  std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag) override {
    return detail::MpiTransfer::post(detail::MpiTransfer::Kind::Send, data, peer, tag, comm_, rank_);
  }

  std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag) override {
    return detail::MpiTransfer::post(detail::MpiTransfer::Kind::Recv, data, peer, tag, comm_, rank_);
  }

  std::unique_ptr<Communicator> split(std::span<const int> ranks, std::shared_ptr<Store> store,
                                      Milliseconds timeout) override;

 private:
  // Posts one nonblocking operation (`post` fills in the request and returns MPI's code), then
  // tests it until done. TimeoutError at the deadline, PeerFailureError when MPI reports failure.
  template <typename Post>
  void run(const char* op, Deadline deadline, Clock::time_point start, Post&& post) {
    MPI_Request request = MPI_REQUEST_NULL;
    int code;
    {
      MpiLock lock;
      code = post(&request);
    }
    if (code != MPI_SUCCESS) throw Error(concat("[mpi ", op, "] rank ", rank_, ": ", detail::mpi_error_text(code)));
    detail::RequestOutcome outcome = detail::wait_for_request(request, deadline);
    if (outcome.complete && outcome.error != MPI_SUCCESS) {
      throw PeerFailureError(concat("[mpi ", op, "] rank ", rank_, " of ", size_, ": ",
                                    detail::mpi_error_text(outcome.error)));
    }
    if (!outcome.complete) {
      failed_ = true;
      detail::mark_mpi_unfinishable();
      throw TimeoutError(concat("[mpi ", op, "] rank ", rank_, ": not complete after ", detail::elapsed_ms(start),
                                " ms"));
    }
  }

  int checked_count(const char* op, int64_t count) const {
    if (count > INT_MAX) {
      throw NotSupportedError(concat("[mpi ", op, "] rank ", rank_, ": ", count,
                                     " elements exceed MPI's int count; split the operation into parts"));
    }
    return static_cast<int>(count);
  }

  // counts as MPI's ints, and each rank's offset into the concatenation.
  std::vector<int> checked_counts(const char* op, std::span<const int64_t> counts,
                                  std::vector<int>* displacements) const {
    std::vector<int> result;
    int64_t offset = 0;
    for (int64_t c : counts) {
      result.push_back(checked_count(op, c));
      displacements->push_back(checked_count(op, offset));
      offset += c;
    }
    checked_count(op, offset);
    return result;
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::atomic<bool> failed_{false};  // a request timed out and may still use comm_
};

std::unique_ptr<Communicator> MpiCommunicator::split(std::span<const int> ranks, std::shared_ptr<Store> store,
                                                     Milliseconds timeout) {
  // MPI_Comm_create_group blocks with no timeout until every member calls it; meeting in the
  // group's store first bounds the wait, and names the members that did not come.
  auto index = std::find(ranks.begin(), ranks.end(), rank_) - ranks.begin();
  store->set(concat("mpi/split/", index), "1");
  std::vector<std::string> keys;
  for (size_t i = 0; i < ranks.size(); ++i) keys.push_back(concat("mpi/split/", i));
  try {
    store->wait(keys, timeout);
  } catch (const TimeoutError& e) {
    std::string missing;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (!store->check({keys[i]})) missing += concat(missing.empty() ? "" : ", ", ranks[i]);
    }
    throw TimeoutError(concat("[mpi split] rank ", rank_, ": rank(s) ", missing, " did not arrive within ",
                              timeout.count(), " ms (", e.what(), ")"));
  }
  MPI_Comm child = MPI_COMM_NULL;
  int code;
  {
    MpiLock lock;
    MPI_Group group = MPI_GROUP_NULL, subgroup = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &group);
    MPI_Group_incl(group, static_cast<int>(ranks.size()), ranks.data(), &subgroup);
    code = MPI_Comm_create_group(comm_, subgroup, kSplitTag, &child);
    MPI_Group_free(&subgroup);
    MPI_Group_free(&group);
  }
  if (code != MPI_SUCCESS) {
    throw PeerFailureError(concat("[mpi split] rank ", rank_, ": MPI_Comm_create_group failed: ",
                                  detail::mpi_error_text(code)));
  }
  return std::make_unique<MpiCommunicator>(child);
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const BackendContext& context) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised && !launched_by_mpi()) {
    throw NotSupportedError(
        "[init_process_group] backend mpi needs processes started by an MPI launcher (`mpirun -np 4 prog` or "
        "srun); this one was not (no OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE in its environment). Start it "
        "with mpirun, or use backend gloo or shm with `tessera run`");
  }
  detail::ensure_mpi_initialised();
  int world_rank = 0, world_size = 1;
  {
    MpiLock lock;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  }
  TESSERA_CHECK(world_rank == context.rank && world_size == context.size, "[init_process_group] backend mpi: ",
                "this process is rank ", world_rank, " of ", world_size, " in MPI_COMM_WORLD but the group asks for rank ",
                context.rank, " of ", context.size, "; backend mpi spans the whole mpirun job (use new_group for "
                "subgroups)");
  // A private communicator, so that our traffic never matches the program's own MPI calls.
  const Clock::time_point start = Clock::now();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  {
    MpiLock lock;
    MPI_Comm_idup(MPI_COMM_WORLD, &comm, &request);
  }
  if (!detail::wait_for_request(request, detail::deadline_after(context.timeout)).complete) {
    detail::mark_mpi_unfinishable();
    throw TimeoutError(concat("[init_process_group] backend mpi: rank ", world_rank,
                              ": duplicating MPI_COMM_WORLD not complete after ", detail::elapsed_ms(start),
                              " ms (did every rank call init_process_group?)"));
  }
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace tessera::dist
