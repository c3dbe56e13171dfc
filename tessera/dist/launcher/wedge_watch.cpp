#include "tessera/dist/launcher/wedge_watch.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/flight_report.h"
#include "tessera/dist/launcher/process_stacks.h"
#include "tessera/io/atomic_file.h"
#include "tessera/util/clock.h"
#include "tessera/util/settings.h"

namespace tessera::dist::launcher {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr int kFramesShown = 12;

void write_notice(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a notice is not worth failing the job over
    done += static_cast<size_t>(n);
  }
}

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, s < 0.1 ? "%.4f s" : "%.1f s", s);
  return text;
}

bool is_stopped(const std::string& state) { return !state.empty() && (state[0] == 'T' || state[0] == 't'); }

// Whether `dir` holds a flight record of global rank `rank` written at or after `since_us`.
bool has_fresh_record(const std::string& dir, int rank, int64_t since_us) {
  std::error_code ec;
  const std::string prefix = "rank-" + std::to_string(rank) + "-";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || e.path().extension() != ".json") continue;
    const auto written = fs::last_write_time(e.path(), ec);
    if (ec) continue;
    const auto unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::file_clock::to_sys(written).time_since_epoch()).count();
    if (unix_us >= since_us) return true;
  }
  return false;
}

}  // namespace

WedgeOptions WedgeOptions::from_environment() {
  WedgeOptions o;
  o.factor = static_cast<double>(env_int("TESSERA_WEDGE_FACTOR", 3));
  o.min_seconds = static_cast<double>(env_int("TESSERA_WEDGE_MIN_MS", 2000)) / 1000.0;
  return o;
}

WedgeWatch::WedgeWatch(WedgeOptions options, std::string job_dir, int notices_fd)
    : options_(options), job_dir_(std::move(job_dir)), notices_fd_(notices_fd) {}

std::optional<double> WedgeWatch::median_step_seconds() const {
  int64_t largest = 0;  // the slowest rank's pace is the job's
  for (const Seen& s : seen_)
    if (s.record) largest = std::max(largest, s.record->median_step_us);
  if (largest == 0) return std::nullopt;
  return static_cast<double>(largest) / 1e6;
}

void WedgeWatch::poll() {
  seen_.resize(workers_.size());
  bool all_between_steps = true, any_record = false;
  for (size_t i = 0; i < workers_.size(); ++i) {
    std::optional<ProgressRecord> now = read_progress_file(workers_[i].progress_file);
    if (!now) {  // not started yet (or never will: not a trainer)
      all_between_steps = false;
      continue;
    }
    any_record = true;
    last_progress_us_ = std::max(last_progress_us_, now->unix_us);
    if (now->phase == ProgressRecord::Phase::Other) all_between_steps = false;
    seen_[i].record = now;
  }
  const std::optional<double> median = median_step_seconds();
  if (options_.factor <= 0 || !any_record || !all_between_steps || !median) return;
  const double limit = std::max(options_.factor * *median, options_.min_seconds);
  const double silent = static_cast<double>(unix_micros() - last_progress_us_) / 1e6;
  if (silent < limit || reported_for_us_ == last_progress_us_) return;
  reported_for_us_ = last_progress_us_;
  char why[256];
  std::snprintf(why, sizeof why, "no rank finished a training step for %s (%g x the median step, %s; at least %s)",
                seconds(silent).c_str(), options_.factor, seconds(*median).c_str(), seconds(options_.min_seconds).c_str());
  report(why);
}

std::string WedgeWatch::flight_dir() const {
  for (const Seen& s : seen_)
    if (s.record && !s.record->flight_dir.empty()) return s.record->flight_dir;
  return std::string();
}

void WedgeWatch::wait_for_flight_records(int64_t since_us, const std::vector<bool>& stopped) const {
  const std::string dir = flight_dir();
  if (dir.empty()) return;
  const Clock::time_point deadline = Clock::now() + options_.flight_wait;
  // A bounded poll of the directory: the records are written by the workers' own threads.
  for (int round = 0; Clock::now() < deadline; ++round) {
    bool all = true;
    for (size_t i = 0; i < workers_.size() && all; ++i)
      if (!stopped[i] && catches_signal(workers_[i].pid, SIGUSR2) && !has_fresh_record(dir, workers_[i].rank, since_us))
        all = false;
    if (all) return;
    ::usleep(20000);  // 20 ms between looks; the deadline bounds the loop
  }
}

std::string WedgeWatch::report(const std::string& why) {
  seen_.resize(workers_.size());
  const int64_t asked_us = unix_micros();
  std::vector<pid_t> pids;
  for (const WatchedWorker& w : workers_) pids.push_back(w.pid);
  // Flight records first (their threads write them while the stacks are taken), then the stacks.
  for (pid_t pid : pids)  // only to those that catch it: to any other it is the end
    if (catches_signal(pid, SIGUSR2)) ::kill(pid, SIGUSR2);
  const std::vector<ProcessStacks> stacks = take_stacks(pids, options_.stack_budget);
  std::vector<bool> stopped;
  for (const ProcessStacks& s : stacks) stopped.push_back(is_stopped(s.state));
  wait_for_flight_records(asked_us, stopped);

  const std::string flights = flight_dir();
  const std::string dir = (fs::path(flights.empty() ? job_dir_ : flights) /
                           ("wedge-" + std::to_string(asked_us / 1000))).string();  // Unix ms
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::string text = "[wedge] " + why + "\n";
  for (size_t i = 0; i < workers_.size(); ++i) {
    const WatchedWorker& w = workers_[i];
    const ProcessStacks& s = stacks[i];
    std::string step = "no step recorded";
    if (seen_[i].record)
      step = "last step " + std::to_string(seen_[i].record->steps) + ", " +
             seconds(static_cast<double>(asked_us - seen_[i].record->unix_us) / 1e6) + " ago";
    text += tessera::detail::concat("[wedge] rank ", w.rank, " (pid ", w.pid, "): ", s.state, "; ", step, "\n");
    if (!s.text.empty()) {
      if (!ec) io::write_file_atomic((fs::path(dir) / ("rank-" + std::to_string(w.rank) + ".stacks.txt")).string(), s.text);
      const std::string frames = thread_frames(s.text, w.pid, kFramesShown);
      text += frames.empty() ? "[wedge]   main thread: no frames (see the file below)\n" : "[wedge]   main thread:\n";
      std::string line;
      for (size_t at = 0; at < frames.size();) {
        const size_t end = frames.find('\n', at);
        text += "[wedge]     " + frames.substr(at, end - at) + "\n";
        at = end == std::string::npos ? frames.size() : end + 1;
      }
    } else {
      text += "[wedge]   no stack: " + s.error + "\n";
    }
  }
  if (!flights.empty()) {
    try {
      const std::string analysis = analyze_flight_records(read_flight_records(flights));
      text += "[wedge] the flight records (" + flights + "):\n";
      for (size_t at = 0; at < analysis.size();) {
        const size_t end = analysis.find('\n', at);
        text += "[wedge]   " + analysis.substr(at, end - at) + "\n";
        at = end == std::string::npos ? analysis.size() : end + 1;
      }
    } catch (const Error& e) {
      text += std::string("[wedge] no flight records to read: ") + e.what() + "\n";
    }
  }
  text += "[wedge] every thread's stack: " + (ec ? std::string("not written (") + ec.message() + ")" : dir) + "\n";
  write_notice(notices_fd_, text);
  try {
    if (!ec) io::write_file_atomic((fs::path(dir) / "report.txt").string(), text);
    io::write_file_atomic((fs::path(job_dir_) / "report.txt").string(), text);
  } catch (const Error& e) {
    write_notice(notices_fd_, std::string("[wedge] the report was not written: ") + e.what() + "\n");
  }
  return text;
}

}  // namespace tessera::dist::launcher
