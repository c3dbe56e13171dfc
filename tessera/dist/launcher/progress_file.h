// A worker's progress as its launcher's wedge watch reads it (wedge_watch.h): the one contract
// between the two processes. The launcher names a file per worker in TESSERA_PROGRESS_FILE; the
// trainer rewrites one record in place (pwrite at offset 0, no fsync: the launcher on the same
// machine reads the page cache) after every training step and when it enters or leaves work that
// is not a step. A program that never writes one is never watched.
//
// The record, kRecordSize bytes, a line padded with spaces:
//   "<steps> <phase> <unix us> <median step us> <pid> <live> <flight dir>"
//   steps      training steps completed so far
//   phase      "step": between training steps, so a long silence is a wedge; "other": evaluating
//              or saving a checkpoint, which may take as long as it takes; "done": training ended
//              (the process is finishing: not watched)
//   unix us    when the record was written
//   median step us  the median of the worker's newest steps (up to 64), measured by the worker
//              itself from one step's record to the next; 0 before its first
//   pid        the trainer's process (the launcher's child may be a wrapper, a shell script): the
//              one whose stacks are taken and that is sent SIGUSR2
//   live       1 when the job runs with live membership (dist/live_membership.h): when this worker
//              is lost, the launcher keeps its peers running and starts a replacement that joins
//   flight dir where this worker's flight records go (dist/flight_recorder.h), "-" when none
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::dist::launcher {

inline constexpr const char* kProgressFileVariable = "TESSERA_PROGRESS_FILE";
// The launcher's pid, which the trainer writes to <output_dir>/launcher.pid for `tessera trace
// stacks` and lets attach to it (ptrace) where Yama allows only ancestors.
inline constexpr const char* kLauncherPidVariable = "TESSERA_LAUNCHER_PID";

struct ProgressRecord {
  enum class Phase { Step, Other, Done };
  int64_t steps = 0;
  Phase phase = Phase::Other;
  int64_t unix_us = 0;
  int64_t median_step_us = 0;  // 0: none measured yet
  int64_t pid = 0;
  std::string flight_dir;      // empty: none
  bool live = false;
};

inline constexpr size_t kProgressRecordSize = 512;

// Exactly kProgressRecordSize bytes; a flight dir that would not fit is left out.
std::string format_progress(const ProgressRecord& record);
// nullopt for anything else (a file being created, another program's bytes).
std::optional<ProgressRecord> parse_progress(std::string_view text);

// The worker's side: opens $TESSERA_PROGRESS_FILE once; every write is one pwrite. Never throws
// after construction: a record that cannot be written is skipped (progress is advisory).
class ProgressWriter {
 public:
  // Null when the variable is unset or the file cannot be opened.
  static std::unique_ptr<ProgressWriter> from_environment();
  ~ProgressWriter();
  ProgressWriter(const ProgressWriter&) = delete;
  ProgressWriter& operator=(const ProgressWriter&) = delete;
  void write(int64_t steps, ProgressRecord::Phase phase);
  void set_flight_dir(std::string dir) { flight_dir_ = std::move(dir); }
  void set_live(bool live) { live_ = live; }
  // The launcher's pid ($TESSERA_LAUNCHER_PID), 0 when unknown.
  int64_t launcher_pid() const { return launcher_pid_; }

 private:
  ProgressWriter(int fd, int64_t launcher_pid) : fd_(fd), launcher_pid_(launcher_pid) {}
  int64_t median_step_us();
  int fd_;
  int64_t launcher_pid_;
  std::string flight_dir_;
  bool live_ = false;
  std::optional<ProgressRecord> last_;
  std::vector<int64_t> steps_us_;  // the newest step times, a ring of kStepsKept
  size_t next_ = 0;
  static constexpr size_t kStepsKept = 64;
};

// The launcher's side: the file's record, nullopt when it is missing or not (yet) a record.
std::optional<ProgressRecord> read_progress_file(const std::string& path);

}  // namespace tessera::dist::launcher
