#include "tessera/util/task_progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace tessera {

TaskProgress::TaskProgress(std::string label, int64_t total)
    : TaskProgress(std::move(label), total, ::isatty(STDERR_FILENO) == 1) {}

TaskProgress::TaskProgress(std::string label, int64_t total, bool interactive)
    : label_(std::move(label)), total_(total), interactive_(interactive) {}

TaskProgress::~TaskProgress() {
  if (interactive_ && drawn_) {
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
}

void TaskProgress::set_total(int64_t total) { total_ = total; }

std::string TaskProgress::format_seconds(double seconds) {
  const int64_t s = std::isfinite(seconds) && seconds > 0 ? static_cast<int64_t>(std::llround(seconds)) : 0;
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(text, sizeof text, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return text;
}

void TaskProgress::advance(int64_t units) {
  done_ += units;
  draw();
}

void TaskProgress::draw() {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const bool known = total_ > 0;
  const double left = known && done_ > 0 ? elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_) : 0;
  if (interactive_) {
    if (known) {
      constexpr int64_t kWidth = 30;
      std::string bar(static_cast<size_t>(std::min(kWidth, kWidth * done_ / total_)), '#');
      bar.resize(kWidth, '.');
      std::fprintf(stderr, "\r%s [%s] %lld/%lld  %s left   ", label_.c_str(), bar.c_str(), static_cast<long long>(done_),
                   static_cast<long long>(total_), format_seconds(left).c_str());
    } else {
      std::fprintf(stderr, "\r%s %lld  %s   ", label_.c_str(), static_cast<long long>(done_), format_seconds(elapsed).c_str());
    }
    std::fflush(stderr);
    drawn_ = true;
    return;
  }
  // A log: a line when the work passes each tenth (or every unit, when there are fewer than ten).
  const int64_t tenth = known ? std::min<int64_t>(10, done_ * 10 / total_) : done_;
  if (tenth == last_tenth_) return;
  last_tenth_ = tenth;
  if (known)
    std::fprintf(stderr, "%s: %lld/%lld done, %s elapsed, %s left\n", label_.c_str(), static_cast<long long>(done_),
                 static_cast<long long>(total_), format_seconds(elapsed).c_str(), format_seconds(left).c_str());
  else
    std::fprintf(stderr, "%s: %lld done, %s elapsed\n", label_.c_str(), static_cast<long long>(done_),
                 format_seconds(elapsed).c_str());
}

}  // namespace tessera
