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
// the newest (what `tessera trace stacks` prints). The launcher's loop waits while a report is made
// (a few hundred milliseconds; at most the stack tools' budget and the flight records' wait).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "tessera/dist/launcher/progress_file.h"

namespace tessera::dist::launcher {

struct WedgeOptions {
  double factor = 3.0;        // TESSERA_WEDGE_FACTOR; 0 turns the watch off
  double min_seconds = 2.0;   // TESSERA_WEDGE_MIN_SECONDS: a floor for jobs of millisecond steps
  std::chrono::milliseconds stack_budget{4000};   // for all the stack tools together
  std::chrono::milliseconds flight_wait{2000};    // for the workers' flight records
  static WedgeOptions from_environment();
};

struct WatchedWorker {
  int rank = 0;
  pid_t pid = -1;
  std::string progress_file;
};

class WedgeWatch {
 public:
  // `job_dir`: where the progress files are and report.txt goes; `notices_fd`: the launcher's stderr.
  WedgeWatch(WedgeOptions options, std::string job_dir, int notices_fd);
  void watch(WatchedWorker worker) { workers_.push_back(std::move(worker)); }

  // Reads the records; makes the report when the job has just become wedged.
  void poll();
  // The report now, whatever the progress (`why` heads it); returns its text.
  std::string report(const std::string& why);

  // The job's median step: the largest of the workers' own medians (progress_file.h), seconds;
  // nullopt before any worker has measured a step.
  std::optional<double> median_step_seconds() const;
  static constexpr std::chrono::milliseconds kInterval{100};

 private:
  struct Seen {
    std::optional<ProgressRecord> record;
  };
  std::string flight_dir() const;
  void wait_for_flight_records(int64_t since_us, const std::vector<bool>& stopped) const;

  WedgeOptions options_;
  std::string job_dir_;
  int notices_fd_;
  std::vector<WatchedWorker> workers_;
  std::vector<Seen> seen_;
  int64_t last_progress_us_ = 0;     // the newest record of any worker
  int64_t reported_for_us_ = -1;     // the silence already reported
};

}  // namespace tessera::dist::launcher
