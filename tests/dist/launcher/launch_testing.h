// Helpers for the launcher tests: a temporary directory, and launch() with the workers' output
// captured in files there. Workers are /bin/sh scripts; where one must wait for another it polls
// a file the other creates (synchronisation inside the job, never a sleep in the test).
#pragma once
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tessera/dist/launcher/launcher.h"

namespace tessera::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-launch-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Captured {
  dist::launcher::LaunchResult result;
  std::string out, err;
};

// launch(options) with the workers' stdout and stderr in two files, read back afterwards.
inline Captured launch_captured(dist::launcher::LaunchOptions options, const TempDir& dir) {
  auto open_file = [&](const char* name) {
    int fd = ::open((dir.path() / name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("cannot open capture file");
    return fd;
  };
  int out = open_file("stdout.txt"), err = open_file("stderr.txt");
  options.stdout_fd = out;
  options.stderr_fd = err;
  Captured c;
  try {
    c.result = dist::launcher::launch(options);
  } catch (...) {
    ::close(out);
    ::close(err);
    throw;
  }
  ::close(out);
  ::close(err);
  c.out = read_text(dir.path() / "stdout.txt");
  c.err = read_text(dir.path() / "stderr.txt");
  return c;
}

// Options running `script` with /bin/sh -c on `nproc` workers.
inline dist::launcher::LaunchOptions sh_job(int nproc, const std::string& script) {
  dist::launcher::LaunchOptions o;
  o.nproc_per_node = nproc;
  o.command = {"/bin/sh", "-c", script};
  return o;
}

}  // namespace tessera::testing
