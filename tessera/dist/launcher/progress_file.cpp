#include "tessera/dist/launcher/progress_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <memory>
#include <sys/prctl.h>
#include <unistd.h>

#include "tessera/util/clock.h"
#include "tessera/util/settings.h"
#include "tessera/util/whole_number.h"

namespace tessera::dist::launcher {

namespace {

const char* phase_text(ProgressRecord::Phase phase) {
  switch (phase) {
    case ProgressRecord::Phase::Step: return "step";
    case ProgressRecord::Phase::Other: return "other";
    case ProgressRecord::Phase::Done: return "done";
  }
  return "other";
}

// The next space-separated field of `text` from `at`.
std::string_view next_field(std::string_view text, size_t& at) {
  while (at < text.size() && text[at] == ' ') ++at;
  const size_t start = at;
  while (at < text.size() && text[at] != ' ' && text[at] != '\n') ++at;
  return text.substr(start, at - start);
}

}  // namespace

std::string format_progress(const ProgressRecord& record) {
  std::string dir = record.flight_dir.empty() ? "-" : record.flight_dir;
  std::string line = std::to_string(record.steps) + " " + phase_text(record.phase) + " " + std::to_string(record.unix_us) +
                     " " + std::to_string(record.median_step_us) + " " + std::to_string(record.pid) +
                     (record.live ? " 1" : " 0");
  // A path with spaces or one too long to fit is not sent: the watch then reads no flight records.
  if (dir.find_first_of(" \n") != std::string::npos || line.size() + 1 + dir.size() + 1 > kProgressRecordSize) dir = "-";
  line += " " + dir;
  line.resize(kProgressRecordSize - 1, ' ');
  return line + "\n";
}

std::optional<ProgressRecord> parse_progress(std::string_view text) {
  if (text.size() != kProgressRecordSize || text.back() != '\n') return std::nullopt;
  size_t at = 0;
  ProgressRecord record;
  auto steps = parse_whole_number(next_field(text, at));
  const std::string_view phase = next_field(text, at);
  auto unix_us = parse_whole_number(next_field(text, at));
  auto median = parse_whole_number(next_field(text, at));
  auto pid = parse_whole_number(next_field(text, at));
  const std::string_view live = next_field(text, at);
  const std::string_view dir = next_field(text, at);
  if (!steps || !unix_us || !median || !pid || (live != "0" && live != "1") || dir.empty()) return std::nullopt;
  record.live = live == "1";
  if (phase == "step") record.phase = ProgressRecord::Phase::Step;
  else if (phase == "other") record.phase = ProgressRecord::Phase::Other;
  else if (phase == "done") record.phase = ProgressRecord::Phase::Done;
  else return std::nullopt;
  record.steps = *steps;
  record.unix_us = *unix_us;
  record.median_step_us = *median;
  record.pid = *pid;
  if (dir != "-") record.flight_dir = std::string(dir);
  return record;
}

std::unique_ptr<ProgressWriter> ProgressWriter::from_environment() {
  const char* path = env_setting(kProgressFileVariable);
  if (path == nullptr || *path == '\0') return nullptr;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  const int64_t launcher_pid = env_int(kLauncherPidVariable, 0);
  // The launcher takes a wedged worker's stacks with a tool it starts: where Yama allows only
  // ancestors to attach (ptrace_scope 1), let the launcher and its descendants do so, also when a
  // wrapper stands between them. Without Yama this fails harmlessly.
  if (launcher_pid > 0) ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(launcher_pid), 0, 0, 0);
  return std::unique_ptr<ProgressWriter>(new ProgressWriter(fd, launcher_pid));
}

ProgressWriter::~ProgressWriter() { ::close(fd_); }

int64_t ProgressWriter::median_step_us() {
  if (steps_us_.empty()) return 0;
  std::vector<int64_t> sorted = steps_us_;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(sorted.size() / 2), sorted.end());
  return sorted[sorted.size() / 2];
}

void ProgressWriter::write(int64_t steps, ProgressRecord::Phase phase) {
  const int64_t now = unix_micros();
  using Phase = ProgressRecord::Phase;
  // A step is the time from one record between steps to the next with more steps: evaluation and
  // saves (another phase in between) are not in it.
  if (last_ && last_->phase == Phase::Step && phase == Phase::Step && steps > last_->steps) {
    const int64_t each = std::max<int64_t>(1, (now - last_->unix_us) / (steps - last_->steps));  // 0 means none
    if (steps_us_.size() < kStepsKept) steps_us_.push_back(each);
    else steps_us_[next_++ % kStepsKept] = each;
  }
  last_ = ProgressRecord{steps, phase, now, median_step_us(), static_cast<int64_t>(::getpid()), flight_dir_, live_};
  const std::string record = format_progress(*last_);
  ssize_t n;
  do n = ::pwrite(fd_, record.data(), record.size(), 0);
  while (n < 0 && errno == EINTR);
}

std::optional<ProgressRecord> read_progress_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  // A read that overlaps the worker's pwrite may see part of each record: two equal reads are one.
  auto read_once = [fd] {
    std::string buffer(kProgressRecordSize, '\0');
    ssize_t n;
    do n = ::pread(fd, buffer.data(), buffer.size(), 0);
    while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(buffer.size())) buffer.clear();
    return buffer;
  };
  std::string first = read_once(), second = read_once();
  ::close(fd);
  if (first.empty() || first != second) return std::nullopt;
  return parse_progress(first);
}

}  // namespace tessera::dist::launcher
