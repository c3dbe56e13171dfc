#include "tessera/dist/backends/mpi/mpi_runtime.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/util/settings.h"

namespace tessera::dist::detail {

namespace {

// Spin, then sched_yield, then sleep: the thresholds are the time since the wait began. 50 µs of
// spinning covers a small allreduce on one machine; sleeps stay at or below 200 µs because Open
// MPI's nonblocking collectives (libnbc) advance a round only when we call MPI_Test.
constexpr auto kSpinFor = std::chrono::microseconds(50);
constexpr auto kYieldFor = std::chrono::milliseconds(2);
constexpr auto kMinPollSleep = std::chrono::microseconds(20);
constexpr auto kMaxPollSleep = std::chrono::microseconds(200);

struct Runtime {
  std::mutex init_mu;  // guards initialised / owned
  bool initialised = false;
  bool owned = false;  // we called MPI_Init_thread, so we finalise
  std::atomic<bool> serialised{false};
  std::atomic<bool> unfinishable{false};
  std::mutex call_mu;  // MpiLock's, when serialised
  std::mutex keep_mu;
  std::vector<std::shared_ptr<void>> keep;
};

// Never destroyed: the atexit handler and late destructors (a ProcessGroup in a global) may run
// after static destruction has begun.
Runtime& runtime() {
  static Runtime* r = new Runtime;
  return *r;
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// MPI_Finalize (a fence with every rank) and MPI_Abort (mpirun ending the job) both wait on other
// processes. A suite run once found mpirun still there 120 s after every rank had passed its test and
// rank 0 had called MPI_Abort (the victim rank was then in MPI_Finalize's fence; which process did not
// end could not be told afterwards, and it did not recur in 12 runs alone). Both are bounded: past
// TESSERA_MPI_EXIT_TIMEOUT_S the process says which call did not return and leaves by itself. The
// default is long (300 s): the fence legitimately waits for a rank still at work (rank 0 writing the
// last checkpoint while the others have finished).
void leave_after_deadline(const char* call) {
  double seconds = 300;
  try {
    seconds = static_cast<double>(env_int("TESSERA_MPI_EXIT_TIMEOUT_S", 300));
  } catch (const ValueError& e) {  // at exit an error would hide the job's outcome: said, then the default
    std::fprintf(stderr, "[mpi exit] %s; using 300 s\n", e.what());
  }
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::thread([seconds, rank, call] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // a deadline, not a synchronisation
    std::fprintf(stderr,
                 "[mpi exit] rank %d: %s did not return within %.0f s (a peer or mpirun is gone or stuck); leaving "
                 "with exit code 1 (TESSERA_MPI_EXIT_TIMEOUT_S)\n",
                 rank, call, seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }).detach();
}

void finalize_at_exit() {
  Runtime& r = runtime();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && r.unfinishable.load()) {
    std::fflush(stdout);
    std::fflush(stderr);
    leave_after_deadline("MPI_Abort");
    MPI_Abort(MPI_COMM_WORLD, 1);  // does not return: mpirun ends every rank of the job
  }
  if (!finalized) {
    leave_after_deadline("MPI_Finalize");
    MPI_Finalize();
  }
  // Only now may rank 0's store server go: every rank has passed the finalize fence, so none is
  // still talking to it. After a failure, stopping it tells the peers at once (PeerFailureError).
  std::vector<std::shared_ptr<void>> keep;
  {
    std::lock_guard lock(r.keep_mu);
    keep.swap(r.keep);
  }
  keep.clear();
}

}  // namespace

void ensure_mpi_initialised() {
  Runtime& r = runtime();
  std::lock_guard lock(r.init_mu);
  if (r.initialised) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw Error("[init_process_group] backend mpi: MPI was already finalised in this process");
  int already = 0;
  MPI_Initialized(&already);
  int provided = MPI_THREAD_SINGLE;
  if (already) {
    MPI_Query_thread(&provided);
  } else {
    int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (code != MPI_SUCCESS) {
      throw Error(tessera::detail::concat("[init_process_group] backend mpi: MPI_Init_thread failed (error ", code,
                                          "); is this process started by a matching mpirun?"));
    }
    r.owned = true;
    std::atexit(finalize_at_exit);
  }
  r.initialised = true;
  if (provided < MPI_THREAD_MULTIPLE) {
    // Correct for MPI_THREAD_SERIALIZED; below that it relies on the library tolerating calls from
    // several threads one at a time, which Open MPI and MPICH do in practice.
    r.serialised = true;
    std::fprintf(stderr,
                 "[mpi] this MPI library provides %s, not MPI_THREAD_MULTIPLE: tessera serialises its MPI calls "
                 "with a lock (point-to-point transfers then wait behind collectives' progress calls)\n",
                 thread_level_name(provided));
  }
}

bool mpi_calls_serialised() { return runtime().serialised.load(); }

MpiLock::MpiLock() {
  if (runtime().serialised.load()) lock_ = std::unique_lock(runtime().call_mu);
}

void mark_mpi_unfinishable() { runtime().unfinishable = true; }

void keep_until_mpi_finalize(std::shared_ptr<void> object) {
  std::lock_guard lock(runtime().keep_mu);
  runtime().keep.push_back(std::move(object));
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return tessera::detail::concat("MPI error ", code);
  return std::string(text, static_cast<size_t>(length));
}

RequestOutcome wait_for_request(MPI_Request& request, Deadline deadline, MPI_Status* status) {
  const Clock::time_point start = Clock::now();
  auto sleep = kMinPollSleep;
  for (;;) {
    int done = 0, code;
    {
      MpiLock lock;
      code = MPI_Test(&request, &done, status);
    }
    if (code != MPI_SUCCESS) return {true, code};
    if (done) return {true, MPI_SUCCESS};
    Clock::time_point now = Clock::now();
    if (now >= deadline) return {false, MPI_SUCCESS};
    auto waited = now - start;
    if (waited < kSpinFor) continue;
    if (waited < kYieldFor) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
    sleep = std::min<std::chrono::microseconds>(sleep * 2, kMaxPollSleep);
  }
}

long long elapsed_ms(Clock::time_point start) {
  return std::chrono::duration_cast<Milliseconds>(Clock::now() - start).count();
}

}  // namespace tessera::dist::detail
