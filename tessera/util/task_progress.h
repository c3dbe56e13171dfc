// Live progress for the long commands that are not training (`tessera eval`, `tessera bench ...`,
// `tessera run --preflight`): on a terminal a bar redrawn in place on stderr,
//   eval [##########....................] 12/40  0:03 left
// and otherwise (a log file, CI) a plain line at each tenth of the work, so logs stay short. Training
// has its own bar with loss and samples/s (train/progress.h).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace tessera {

class TaskProgress {
 public:
  // `total` units of work; 0 or less: unknown (the count is shown without a bar or an estimate).
  TaskProgress(std::string label, int64_t total);
  TaskProgress(std::string label, int64_t total, bool interactive);
  ~TaskProgress();  // ends the bar's line
  TaskProgress(const TaskProgress&) = delete;
  TaskProgress& operator=(const TaskProgress&) = delete;

  void advance(int64_t units = 1);
  void set_total(int64_t total);
  int64_t done() const { return done_; }
  // "0:03": minutes and seconds (hours when there are any).
  static std::string format_seconds(double seconds);

 private:
  void draw();
  std::string label_;
  int64_t total_;
  int64_t done_ = 0;
  int64_t last_tenth_ = 0;
  bool interactive_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace tessera
