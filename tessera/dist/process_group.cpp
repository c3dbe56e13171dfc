// ProcessGroup's executor: construction, the queue of tasks, the worker thread that runs them (above
// the process's priority), the inline run of a task by the thread that waits on it, and the failure
// context a failed task carries. The collective entry points that queue tasks are in
// process_group_collectives.cpp; the watchdog, the collective check, the flight record and debug
// mode in process_group_{watchdog,check,flight,debug}.cpp.
#include "tessera/dist/process_group.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <pthread.h>
#include <set>
#include <string_view>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/issuing_blocking.h"
#include "tessera/dist/store/prefix_store.h"
#include "tessera/ops/ops.h"
#include "tessera/observe/trace.h"
#include "tessera/util/settings.h"
#include "tessera/util/thread_priority.h"

namespace tessera::dist {

using tessera::detail::concat;

namespace {

// TESSERA_COMM_PRIORITY: nice levels the collectives thread runs above the process (0 to 39).
int comm_priority_setting() { return static_cast<int>(env_int("TESSERA_COMM_PRIORITY", 10)); }

// The same exception type as `error`, with `prefix` and `suffix` around its message, so callers
// can still catch TimeoutError / PeerFailureError by type.
std::exception_ptr with_context(std::exception_ptr error, const std::string& prefix, const std::string& suffix) {
  auto text = [&](const std::exception& e) { return prefix + e.what() + suffix; };
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    return std::make_exception_ptr(TimeoutError(text(e)));
  } catch (const PeerFailureError& e) {
    return std::make_exception_ptr(PeerFailureError(text(e)));
  } catch (const NotSupportedError& e) {
    return std::make_exception_ptr(NotSupportedError(text(e)));
  } catch (const ValueError& e) {
    return std::make_exception_ptr(ValueError(text(e)));
  } catch (const IoError& e) {
    return std::make_exception_ptr(IoError(text(e)));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(Error(text(e)));
  } catch (...) {
    return std::make_exception_ptr(Error(prefix + "unknown exception" + suffix));
  }
}

bool is_communication_failure(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError&) {
    return true;
  } catch (const PeerFailureError&) {
    return true;
  } catch (...) {
    return false;
  }
}

// "parallel/ddp/reducer.cpp:120": the last three parts of the path are enough to find the file.
std::string call_site_text(const char* file_name, uint32_t line) {
  if (file_name == nullptr) return "an unknown place";
  std::string_view file = file_name;
  size_t cut = file.size();
  for (int parts = 0; parts < 3 && cut != std::string_view::npos && cut > 0; ++parts) cut = file.rfind('/', cut - 1);
  if (cut != std::string_view::npos) file.remove_prefix(cut + 1);
  return concat(file, ":", line);
}

bool same_call(const detail::CallKey& a, const detail::CallKey& b) {
  // op and file are string literals: the same pointer is the same text (different pointers with
  // the same text only cost a second interned copy).
  return a.op == b.op && a.file == b.file && a.line == b.line && a.numbers == b.numbers &&
         std::equal(a.counts.begin(), a.counts.end(), b.counts.begin(), b.counts.end());
}

}  // namespace

ProcessGroup::ProcessGroup(std::unique_ptr<Communicator> communicator, std::shared_ptr<Store> store,
                           ProcessGroupOptions options, std::vector<int> global_ranks, const std::string& lineage)
    : communicator_(std::move(communicator)), store_(std::move(store)), options_(options),
      flight_(options.flight_entries) {
  TESSERA_CHECK(communicator_ != nullptr, "[ProcessGroup] communicator is null");
  TESSERA_CHECK(store_ != nullptr, "[ProcessGroup] store is null");
  TESSERA_CHECK(options_.timeout > Milliseconds(0), "[ProcessGroup] timeout must be positive");
  rank_ = communicator_->rank();
  size_ = communicator_->size();
  if (global_ranks.empty()) {
    global_ranks.resize(static_cast<size_t>(size_));
    std::iota(global_ranks.begin(), global_ranks.end(), 0);
  }
  TESSERA_CHECK(static_cast<int>(global_ranks.size()) == size_, "[ProcessGroup] ", global_ranks.size(),
                " global ranks for a group of ", size_);
  global_ranks_ = std::move(global_ranks);
  name_ = flight_group_name(global_ranks_, lineage);
  // Which machine each rank runs on, for failure reports (describe_stragglers) across hosts.
  try {
    store_->set(concat("host/", rank_), this_host());
  } catch (const std::exception&) {
    // A report without host names is still a report.
  }
  worker_priority_ = comm_priority_setting();
  worker_ = std::thread([this] { run_worker(); });
  watchdog_ = std::thread([this] { run_watchdog(); });
  register_flight_group(this);
}

ProcessGroup::~ProcessGroup() {
  unregister_flight_group(this);
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  bool mismatched = false, stuck = false;
  std::string stuck_call;
  {
    std::lock_guard lock(mu_);
    mismatched = mismatched_;
    stuck = in_flight_call_ != nullptr;
    if (stuck) stuck_call = in_flight_call_->description(in_flight_sequence_);
  }
  if (mismatched) {
    // Every rank's caller has had the report before any rank leaves (a rank that left first would
    // have the launcher stop the others before they said why).
    wait_for_ranks_leaving_after_mismatch();
    if (stuck && options_.exit_when_stuck_after_mismatch) {
      // The backend is still inside the failed collective and would hold this process until the
      // timeout. The report is already on stderr.
      std::fprintf(stderr, "[collective check] rank %d: %s is still stuck in the backend after the mismatch; exiting\n",
                   rank_, stuck_call.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  worker_.join();  // drains the queue; each task is bounded by the timeout
  watchdog_cv_.notify_all();
  watchdog_.join();
}

// ---- queue ----------------------------------------------------------------------------------

WorkPtr ProcessGroup::enqueue(const detail::CallKey& key, detail::DetailsText details, std::vector<Tensor> keep,
                              std::function<void(Deadline)> body, Device device) {
  Task task;
  task.keep = std::move(keep);
  task.body = std::move(body);
  task.device = device;
  // The compute stream's point at the call: what was issued to it so far produced the buffers.
  if (!device.is_cpu() && communicator_->stream(device) != nullptr) task.ready = current_stream(device).record();
  return enqueue_task(std::move(task), &key, &details);
}

CallTextPtr ProcessGroup::intern_call(const detail::CallKey& key, detail::DetailsText details) {
  // Newest first: a loop's calls come back in the order they were interned.
  for (auto it = call_texts_.rbegin(); it != call_texts_.rend(); ++it)
    if (same_call(it->key, key)) return it->text;
  auto text = std::make_shared<CallText>();
  text->op = key.op;
  text->signature = concat(key.op, " (", details(), ")");
  text->call_site = call_site_text(key.file, key.line);
  if (call_texts_.size() == kCallTextsKept) call_texts_.pop_front();
  InternedCall& kept = call_texts_.emplace_back(InternedCall{key, {key.counts.begin(), key.counts.end()}, text});
  kept.key.counts = kept.counts;
  return text;
}

std::vector<std::pair<uint64_t, int64_t>> ProcessGroup::recent_arrivals() const {
  std::lock_guard lock(mu_);
  return {arrivals_.begin(), arrivals_.end()};
}

WorkPtr ProcessGroup::enqueue_task(Task task, const detail::CallKey* key, const detail::DetailsText* details) {
  std::unique_lock lock(mu_);
  if (key != nullptr) task.call = intern_call(*key, *details);
  if (task.collective) {
    task.sequence = next_sequence_++;
    const int64_t now_us = unix_micros();
    arrivals_.emplace_back(task.sequence, now_us);
    if (arrivals_.size() > kArrivalsKept) arrivals_.pop_front();
    flight_.queued(task.sequence, task.call, now_us);
  }
  task.work = std::make_shared<Work>(task.call, task.sequence);
  // wait() runs the task on the waiting thread when the worker has not started it yet: a small
  // collective then costs no hand-over between threads (two futex wake-ups, each a context switch).
  // Only over a backend the collective check can abort: it must get the waiting thread out of a
  // mismatched collective, as it gets the caller out when the worker is the one stuck.
  // (A group that is not owned by a shared_ptr, as in some tests, cannot hand its Work a way back
  // to it, and keeps to the worker.)
  if (communicator_->abortable()) {
    if (std::weak_ptr<InlineRunner> runner = weak_from_this(); !runner.expired()) task.work->set_run_inline(std::move(runner));
  }
  // A blocking form's caller runs the task itself in wait() (or the worker does, after the task it
  // is running): waking the worker would only cost a context switch, on a core a peer may need
  // (a 4 KiB all-reduce of 2 processes over shm: 1.4 us without the wake-up, 2.8-4.5 us with it).
  const bool wake_worker = !(detail::issuing_blocking && task.work->runs_inline());
  WorkPtr work = task.work;
  queue_.push_back(std::move(task));
  lock.unlock();
  if (wake_worker) queue_cv_.notify_one();
  return work;
}

void ProcessGroup::run_worker() {
  // Above the rank's compute threads: a collective's peers wait on this thread, and with a core per
  // rank it shares that core with backward. `tessera bench ddp --models cnn --repeats 2 --steps 100
  // --no-torch`, five alternating pairs at the same and at 10 levels above: the all-reduces took
  // 0.58-0.91 ms a step from the last rank's start against 0.24-0.48 (faster in every pair), with
  // DDP's scaling within the noise (1.83-1.95x against 1.87-1.96x); the GPT's went from 1.62 to
  // 0.65 ms. Where the process may not raise priorities the thread stays as it is.
  raise_this_thread_priority(worker_priority_);
  pthread_setname_np(pthread_self(), "tessera-comm");  // in top -H, perf and gdb
  bool named = false;  // the timeline's communication lane, named once tracing is on
  std::unique_lock lock(mu_);
  for (;;) {
    // One task runs at a time, on this thread or on a thread waiting for it (run_queued_through).
    queue_cv_.wait(lock, [&] { return (stopping_ || !queue_.empty()) && !running_; });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    if (!named && observe::tracing_enabled()) {
      observe::name_trace_thread(std::string("collectives (") + backend_name() + ")");
      named = true;
    }
    run_front(lock);
  }
}

void ProcessGroup::run_front(std::unique_lock<std::mutex>& lock) {
  Task task = std::move(queue_.front());
  queue_.pop_front();
  std::exception_ptr broken = broken_;
  std::string broken_by = broken_by_;
  if (!broken && task.collective) {
    in_flight_sequence_ = task.sequence;
    in_flight_call_ = task.call;
    in_flight_work_ = task.work;
  }
  running_ = true;
  lock.unlock();
  try {
    if (broken) {
      task.work->finish(with_context(broken, concat("[", task.description(), "] not run: the group failed earlier in ",
                                                    broken_by, ": "),
                                     ""));
    } else {
      run_task(task);
    }
  } catch (...) {
    // run_task reports the body's errors itself; what is left (out of memory while describing one)
    // still ends this task, and the group runs on: a waiter must never wait for a task nobody runs.
    task.work->finish(std::current_exception());
  }
  task = Task{};  // drops the kept tensors before the next task, as the worker always has
  lock.lock();
  running_ = false;
}

void ProcessGroup::run_queued_through(const Work* work) {
  std::unique_lock lock(mu_);
  // Only while no task runs, so the order stays the order of issue; the tasks ahead of `work` run
  // first. The lock is held between tasks, so the worker cannot start one in between.
  if (running_ ||
      std::none_of(queue_.begin(), queue_.end(), [&](const Task& t) { return t.work.get() == work; }))
    return;
  bool ran_work = false;
  while (!ran_work) {
    ran_work = queue_.front().work.get() == work;
    run_front(lock);
  }
  const bool wake_worker = !queue_.empty() || stopping_;  // it skipped what was queued meanwhile
  lock.unlock();
  if (wake_worker) queue_cv_.notify_all();
}

void ProcessGroup::run_task(Task& task) {
  const auto started = std::chrono::steady_clock::now();
  const Deadline deadline = started + detail::clamp_timeout(options_.timeout);
  std::exception_ptr error;
  const int64_t started_us = unix_micros();
  if (task.collective) flight_.started(task.sequence, started_us);
  {
    // Ends before the work is marked finished: a waiter woken by it starts after the span's end.
    // The description is built only when a timeline is recorded.
    const std::string traced = observe::tracing_enabled() ? task.description() : std::string();
    observe::TraceSpan span(traced, "comm");
    try {
      if (options_.debug && task.collective && size_ > 1) check_same_call(task, deadline);
      // A device backend's stream runs the operation after the compute that made its buffers, and
      // its end goes into the Work: wait() orders the compute stream after it, not the host.
      Stream* device_stream = task.device.is_cpu() ? nullptr : communicator_->stream(task.device);
      if (device_stream && task.ready) device_stream->wait(*task.ready);
      task.body(deadline);
      if (device_stream) task.work->set_completion_event(device_stream->record(), task.device);
    } catch (...) {
      error = std::current_exception();
    }
  }
  const int64_t took_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count();
  busy_ns_ += took_ns;
  // One clock read less per call: the end is the start plus what the steady clock measured.
  const int64_t finished_us = started_us + took_ns / 1000;
  if (!error) {
    if (task.collective) flight_.finished(task.sequence, finished_us);
    {
      std::lock_guard lock(mu_);
      clear_in_flight();
    }
    task.work->finish(nullptr);
    return;
  }
  std::string report;
  if (task.collective && size_ > 1 && is_communication_failure(error)) report = describe_stragglers(task);
  const std::string description = task.description();
  std::string prefix = concat("[", description, "] rank ", rank_, " of ", size_, " (", backend_name(), "): ");
  std::exception_ptr contextual = with_context(error, prefix, report);
  if (task.collective) {
    std::string message;
    try {
      std::rethrow_exception(contextual);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "an unknown error";
    }
    flight_.finished(task.sequence, finished_us, message);
    dump_flight_record("failed: " + message);
  }
  {
    std::lock_guard lock(mu_);
    clear_in_flight();
    if (!broken_) {
      broken_ = contextual;
      broken_by_ = description;
    }
  }
  task.work->finish(contextual);
}

// ---- subgroups ------------------------------------------------------------------------------

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(std::vector<int> ranks) {
  TESSERA_CHECK(!ranks.empty(), "[new_group] ranks is empty");
  std::sort(ranks.begin(), ranks.end());
  TESSERA_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), "[new_group] ranks repeat");
  for (int r : ranks) check_rank(r, "new_group", "rank");
  uint64_t id;
  {
    std::lock_guard lock(mu_);
    id = groups_created_++;
  }
  auto member = std::find(ranks.begin(), ranks.end(), rank_);
  if (member == ranks.end()) return nullptr;
  auto group_store = std::make_shared<PrefixStore>(concat("group", id), store_);
  std::unique_ptr<Communicator> child;
  Task task;
  task.collective = false;
  auto call = std::make_shared<CallText>();
  call->op = "new_group";
  call->signature = concat("new_group #", id, " (", ranks.size(), " ranks)");
  call->call_site = "new_group";
  call->numbered = false;
  task.call = std::move(call);
  // Runs on the worker thread, in order with the collectives (backends such as MPI create
  // communicators collectively, and must not do so concurrently with another call).
  task.body = [&](Deadline) { child = communicator_->split(ranks, group_store, options_.timeout); };
  enqueue_task(std::move(task))->wait();
  std::vector<int> global;
  for (int r : ranks) global.push_back(global_ranks_[static_cast<size_t>(r)]);
  return std::make_shared<ProcessGroup>(std::move(child), group_store, options_, std::move(global),
                                        concat(name_, "/", id));
}

}  // namespace tessera::dist
