#include "tessera/dist/launcher/wedge_watch.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/flight_report.h"
#include "tessera/dist/launcher/fd.h"
#include "tessera/dist/launcher/process_stacks.h"
#include "tessera/io/atomic_file.h"
#include "tessera/util/clock.h"
#include "tessera/util/settings.h"

#include <exception>

namespace tessera::dist::launcher {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr int kFramesShown = 12;

// A notice is not worth failing the job over: what cannot be written is dropped.
void write_notice(int fd, const std::string& text) { detail::write_all(fd, text.data(), text.size()); }

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

namespace {

// The process a worker's stacks and signals are for: its trainer's, when its record says which.
pid_t target_pid(const WatchedWorker& w, const std::optional<ProgressRecord>& record) {
  return record && record->pid > 0 ? static_cast<pid_t>(record->pid) : w.pid;
}

std::string flight_dir_of(const WedgeWatch::Snapshot& s) {
  for (const auto& r : s.records)
    if (r && !r->flight_dir.empty()) return r->flight_dir;
  return std::string();
}

// Waits (looking every 20 ms, at most `wait`) until each worker that can answer has written a flight
// record since `since_us`.
void wait_for_flight_records(const WedgeWatch::Snapshot& s, const std::vector<pid_t>& pids, const std::vector<bool>& stopped,
                             int64_t since_us, std::chrono::milliseconds wait) {
  const std::string dir = flight_dir_of(s);
  if (dir.empty()) return;
  const Clock::time_point deadline = Clock::now() + wait;
  while (Clock::now() < deadline) {
    bool all = true;
    for (size_t i = 0; i < pids.size() && all; ++i)
      if (!stopped[i] && catches_signal(pids[i], SIGUSR2) && !has_fresh_record(dir, s.workers[i].rank, since_us)) all = false;
    if (all) return;
    ::usleep(20000);  // the records are written by the workers' own threads; the deadline bounds this
  }
}

// The report of `s` (wedge_watch.h), written and printed; its text.
std::string make_report(const WedgeWatch::Snapshot& s, const WedgeOptions& options, const std::string& job_dir,
                        int notices_fd, const std::string& why) {
  const int64_t asked_us = unix_micros();
  std::vector<pid_t> pids;
  for (size_t i = 0; i < s.workers.size(); ++i) pids.push_back(target_pid(s.workers[i], s.records[i]));
  // Flight records first (their threads write them while the stacks are taken), then the stacks.
  for (pid_t pid : pids)  // only to those that catch it: to any other it is the end
    if (catches_signal(pid, SIGUSR2)) ::kill(pid, SIGUSR2);
  const std::vector<ProcessStacks> stacks = take_stacks(pids, options.stack_budget);
  std::vector<bool> stopped;
  for (const ProcessStacks& st : stacks) stopped.push_back(is_stopped(st.state));
  wait_for_flight_records(s, pids, stopped, asked_us, options.flight_wait);

  const std::string flights = flight_dir_of(s);
  const std::string dir = (fs::path(flights.empty() ? job_dir : flights) /
                           ("wedge-" + std::to_string(asked_us / 1000))).string();  // Unix ms
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::string text = "[wedge] " + why + "\n";
  for (size_t i = 0; i < s.workers.size(); ++i) {
    const ProcessStacks& st = stacks[i];
    std::string step = "no step recorded";
    if (s.records[i])
      step = "last step " + std::to_string(s.records[i]->steps) + ", " +
             seconds(static_cast<double>(asked_us - s.records[i]->unix_us) / 1e6) + " ago";
    text += tessera::detail::concat("[wedge] rank ", s.workers[i].rank, " (pid ", pids[i], "): ", st.state, "; ", step, "\n");
    if (st.text.empty()) {
      text += "[wedge]   no stack: " + st.error + "\n";
      continue;
    }
    if (!ec) {
      try {
        io::write_file_atomic((fs::path(dir) / ("rank-" + std::to_string(s.workers[i].rank) + ".stacks.txt")).string(), st.text);
      } catch (const std::exception& e) {
        text += std::string("[wedge]   its stacks were not written: ") + e.what() + "\n";
      }
    }
    const std::string frames = thread_frames(st.text, pids[i], kFramesShown);
    text += frames.empty() ? "[wedge]   main thread: no frames here (see the file below)\n" : "[wedge]   main thread:\n";
    for (size_t at = 0; at < frames.size();) {
      const size_t end = frames.find('\n', at);
      text += "[wedge]     " + frames.substr(at, end - at) + "\n";
      at = end == std::string::npos ? frames.size() : end + 1;
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
    } catch (const std::exception& e) {
      text += std::string("[wedge] no flight records to read: ") + e.what() + "\n";
    }
  }
  text += "[wedge] every thread's stack: " + (ec ? std::string("not written (") + ec.message() + ")" : dir) + "\n";
  write_notice(notices_fd, text);
  try {
    if (!ec) io::write_file_atomic((fs::path(dir) / "report.txt").string(), text);
    io::write_file_atomic((fs::path(job_dir) / "report.txt").string(), text);
  } catch (const std::exception& e) {
    write_notice(notices_fd, std::string("[wedge] the report was not written: ") + e.what() + "\n");
  }
  return text;
}

}  // namespace

WedgeWatch::WedgeWatch(WedgeOptions options, std::string job_dir, int notices_fd)
    : options_(options), job_dir_(std::move(job_dir)), notices_fd_(notices_fd) {}

WedgeWatch::~WedgeWatch() {
  if (reporting_.joinable()) reporting_.join();
}

void WedgeWatch::watch(WatchedWorker worker) {
  workers_.push_back(std::move(worker));
  records_.emplace_back();
}

void WedgeWatch::forget(pid_t pid) {
  for (size_t i = 0; i < workers_.size(); ++i)
    if (workers_[i].pid == pid) {
      workers_.erase(workers_.begin() + static_cast<long>(i));
      records_.erase(records_.begin() + static_cast<long>(i));
      return;
    }
}

std::optional<double> WedgeWatch::median_step_seconds() const {
  int64_t largest = 0;  // the slowest rank's pace is the job's
  for (const auto& r : records_)
    if (r) largest = std::max(largest, r->median_step_us);
  if (largest == 0) return std::nullopt;
  return static_cast<double>(largest) / 1e6;
}

void WedgeWatch::poll() {
  bool all_between_steps = true, any_watched = false;
  for (size_t i = 0; i < workers_.size(); ++i) {
    std::optional<ProgressRecord> now = read_progress_file(workers_[i].progress_file);
    if (now) records_[i] = now;
    if (records_[i] && records_[i]->phase == ProgressRecord::Phase::Done) continue;  // finishing: not watched
    any_watched = true;
    if (!records_[i]) {  // not started yet (or never will: not a trainer)
      all_between_steps = false;
      continue;
    }
    last_progress_us_ = std::max(last_progress_us_, records_[i]->unix_us);
    if (records_[i]->phase == ProgressRecord::Phase::Other) all_between_steps = false;
  }
  const std::optional<double> median = median_step_seconds();
  if (options_.factor <= 0 || !any_watched || !all_between_steps || !median) return;
  const double limit = std::max(options_.factor * *median, options_.min_seconds);
  const double silent = static_cast<double>(unix_micros() - last_progress_us_) / 1e6;
  if (silent < limit || reported_for_us_ == last_progress_us_) return;
  reported_for_us_ = last_progress_us_;
  char why[256];
  std::snprintf(why, sizeof why, "no rank finished a training step for %s (%g x the median step, %s; at least %s)",
                seconds(silent).c_str(), options_.factor, seconds(*median).c_str(), seconds(options_.min_seconds).c_str());
  start_report(why);
}

void WedgeWatch::ask(const std::string& why) { start_report(why); }

WedgeWatch::Snapshot WedgeWatch::snapshot() const {
  Snapshot s;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (records_[i] && records_[i]->phase == ProgressRecord::Phase::Done) continue;
    s.workers.push_back(workers_[i]);
    s.records.push_back(records_[i]);
  }
  return s;
}

void WedgeWatch::start_report(const std::string& why) {
  if (!options_.in_background) {
    report(why);
    return;
  }
  if (!report_done_->load()) return;  // one report at a time: the one in the making answers this too
  if (reporting_.joinable()) reporting_.join();
  report_done_->store(false);
  reporting_ = std::thread([snapshot = snapshot(), options = options_, dir = job_dir_, fd = notices_fd_, why,
                            done = report_done_] {
    try {
      make_report(snapshot, options, dir, fd, why);
    } catch (const std::exception& e) {
      write_notice(fd, std::string("[wedge] no report: ") + e.what() + "\n");
    }
    done->store(true);
  });
}

std::string WedgeWatch::report(const std::string& why) {
  try {
    return make_report(snapshot(), options_, job_dir_, notices_fd_, why);
  } catch (const std::exception& e) {
    const std::string text = std::string("[wedge] no report: ") + e.what() + "\n";
    write_notice(notices_fd_, text);
    return text;
  }
}

}  // namespace tessera::dist::launcher
