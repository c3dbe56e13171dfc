// Prefixes each line a worker writes with "[rank R] ", so the interleaved output of N workers stays
// readable. Each finished line goes out in one write(), so lines from different ranks never mix
// mid-line (the launcher is single-threaded, and pipes and O_APPEND files keep one write whole).
#pragma once
#include <string>

namespace tessera::dist::launcher {

class LinePrefixer {
 public:
  // A line longer than this without a newline is written out as a line of its own, so a worker
  // printing a progress bar with '\r' cannot grow the launcher's memory without bound.
  static constexpr size_t kMaxLine = 64 * 1024;

  LinePrefixer(std::string prefix, int out_fd) : prefix_(std::move(prefix)), out_fd_(out_fd) {}

  // Writes every complete line in the data so far; keeps the unfinished tail.
  void write(const char* data, size_t size);
  // Writes the unfinished tail, ending it with a newline (at the worker's exit or EOF).
  void finish();

 private:
  void emit(const char* line, size_t size);

  std::string prefix_;
  int out_fd_;
  std::string partial_;
  std::string scratch_;
};

}  // namespace tessera::dist::launcher
