// The wedge watch: the launcher's eye on its workers' progress (progress_file.h). A job is wedged
// when none of its workers has finished a training step for `factor` times the median step (at
// least `min_seconds`) while every one of them is between steps (none evaluating, saving or
// starting). It is armed from the first measured step, so a wedge in the first minute is reported
// as one in the tenth hour is, and it needs nothing from the workers but their records: a stopped
// (SIGSTOP) or deadlocked worker cannot help.
//
// The report, once per silence (again after the job moves and stops again), and on demand (SIGUSR2
// to the launcher, `tessera trace stacks`):
//  - each worker's state (/proc: running, sleeping, stopped) and last step;
//  - every thread's stack of each worker, symbolised (process_stacks.h), in rank-R.stacks.txt, and
//    its main thread's top frames in the summary;
//  - the flight records: SIGUSR2 to each worker makes its process groups write them (a stopped one
//    cannot), and `tessera trace analyze`'s reading of them (which rank is missing from which
//    collective) is part of the report.
// It goes to the launcher's stderr and, with the stacks, to a directory wedge-<unix ms>/ beside the
// flight records (the job directory when there are none), named by the Unix milliseconds; the job directory's report.txt is always
// the newest (what `tessera trace stacks` prints). A report is made on a thread of its own, so the
// launcher's loop (its signals, its workers' output, the elastic agent's heartbeats) goes on; it
// takes a few hundred milliseconds, at most the stack tools' budget and the flight records' wait.
// A worker that has exited (reaped) or finished training ("done") is no longer watched.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "tessera/dist/launcher/progress_file.h"

namespace tessera::dist::launcher {

struct WedgeOptions {
  double factor = 3.0;        // TESSERA_WEDGE_FACTOR; 0 turns the watch off
  double min_seconds = 2.0;   // TESSERA_WEDGE_MIN_MS: a floor for jobs of millisecond steps
  std::chrono::milliseconds stack_budget{4000};   // for all the stack tools together
  std::chrono::milliseconds flight_wait{2000};    // for the workers' flight records
  bool in_background = true;  // poll() and ask() make the report on a thread (false: before returning)
  static WedgeOptions from_environment();
};

struct WatchedWorker {
  int rank = 0;
  pid_t pid = -1;  // the launcher's child; a record's own pid (the trainer behind a wrapper) wins
  std::string progress_file;
};

class WedgeWatch {
 public:
  // `job_dir`: where the progress files are and report.txt goes; `notices_fd`: the launcher's stderr.
  WedgeWatch(WedgeOptions options, std::string job_dir, int notices_fd);
  ~WedgeWatch();  // waits for a report in the making (bounded by its budgets)
  WedgeWatch(const WedgeWatch&) = delete;
  WedgeWatch& operator=(const WedgeWatch&) = delete;

  void watch(WatchedWorker worker);
  // The launcher reaped this child: its pid may be another process's from now on.
  void forget(pid_t pid);

  // Reads the records; makes the report when the job has just become wedged.
  void poll();
  // The report now, whatever the progress (`why` heads it), as options say (SIGUSR2).
  void ask(const std::string& why);
  // The report now, on this thread; its text. Never throws: a failure is in the text.
  std::string report(const std::string& why);

  // The job's median step: the largest of the workers' own medians (progress_file.h), seconds;
  // nullopt before any worker has measured a step.
  std::optional<double> median_step_seconds() const;
  static constexpr std::chrono::milliseconds kInterval{100};

  // What a report is made from: the workers and their newest records, copied for its thread.
  struct Snapshot {
    std::vector<WatchedWorker> workers;
    std::vector<std::optional<ProgressRecord>> records;
  };

 private:
  void start_report(const std::string& why);
  Snapshot snapshot() const;

  WedgeOptions options_;
  std::string job_dir_;
  int notices_fd_;
  std::vector<WatchedWorker> workers_;
  std::vector<std::optional<ProgressRecord>> records_;  // by worker, the newest of this job
  int64_t last_progress_us_ = 0;  // the newest record of any watched worker
  int64_t reported_for_us_ = -1;  // the silence already reported
  std::thread reporting_;
  std::shared_ptr<std::atomic<bool>> report_done_ = std::make_shared<std::atomic<bool>>(true);
};

}  // namespace tessera::dist::launcher
