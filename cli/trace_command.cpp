// tessera trace merge DIR: every rank's timeline (DIR/rank-*.json, written by `tessera train --trace`)
// on one timeline, DIR/timeline.json, for Perfetto or chrome://tracing. tessera trace analyze DIR:
// the flight records of a stuck or failed job, read together (dist/flight_report.h). tessera trace
// stacks JOB: a live job's stacks and flight records, now, from its launcher (wedge_watch.h).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "tessera/core/error.h"
#include "tessera/dist/flight_report.h"
#include "tessera/dist/launcher/process_stacks.h"
#include "tessera/io/atomic_file.h"
#include "tessera/observe/trace.h"

namespace tessera::cli {

namespace {

// The inode of `path`, 0 when there is none: a report replaced by rename has a new one.
ino_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// `tessera trace stacks JOB`: JOB is the launcher's pid, or a run's output directory, where rank 0
// wrote its launcher's pid. SIGUSR2 asks that launcher for a report (wedge_watch.h), which it writes
// to its job directory's report.txt; this waits for the new one, at most `wait`.
int print_live_stacks(const std::string& job, std::chrono::seconds wait) {
  namespace fs = std::filesystem;
  std::string pid_text = job;
  if (fs::is_directory(job)) {
    std::ifstream in(fs::path(job) / "launcher.pid");
    TESSERA_CHECK(static_cast<bool>(in >> pid_text), "[trace] ", job, " has no launcher.pid: that run was not "
                  "started by tessera run / tessera train --nproc, or is older than the wedge watch");
  }
  char* end = nullptr;
  const long pid = std::strtol(pid_text.c_str(), &end, 10);
  TESSERA_CHECK(end != pid_text.c_str() && *end == '\0' && pid >= 1, "[trace] '", job,
                "' is neither a launcher's pid nor a run's output directory");
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tessera-job-" + std::to_string(pid);
  struct stat st {};
  TESSERA_CHECK(::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid(), "[trace] no live "
                "job of launcher pid ", pid, " (no ", dir, "; the job has ended, or its launcher runs with another "
                "TMPDIR or user)");
  // A job directory outlives a launcher killed with SIGKILL, and its pid may be another process's
  // now: SIGUSR2 goes only to a process that catches it (to any other it is the end).
  TESSERA_CHECK(dist::launcher::catches_signal(static_cast<pid_t>(pid), SIGUSR2), "[trace] pid ", pid,
                " does not answer SIGUSR2: it is not a launcher running workers now (the job has ended, is between "
                "elastic generations, or runs with TESSERA_WEDGE_FACTOR=0)");
  const std::string report = dir + "/report.txt";
  const ino_t before = inode_of(report);
  TESSERA_CHECK(::kill(static_cast<pid_t>(pid), SIGUSR2) == 0, "[trace] cannot signal launcher pid ", pid, ": ",
                std::strerror(errno));
  // A bounded look every 50 ms: the launcher takes the stacks with a tool and waits for the records.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    const ino_t now = inode_of(report);
    if (now != 0 && now != before) {
      std::ifstream in(report);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::printf("%s", text.c_str());
      return 0;
    }
    ::usleep(50000);
  }
  throw TimeoutError(tessera::detail::concat("[trace] launcher pid ", pid, " wrote no report within ", wait.count(),
                                             " s (", report, ")"));
}

}  // namespace

Command add_trace_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("trace", "Timelines of a run (tessera train --trace)");
  cmd->require_subcommand(1);
  auto* merge = cmd->add_subcommand("merge", "Put every rank's trace of DIR on one timeline (DIR/timeline.json)");
  auto dir = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  merge->add_option("dir", *dir, "A run's trace directory (<output_dir>/trace)")->required();
  merge->add_option("-o,--output", *output, "Where to write the merged timeline");
  auto* analyze = cmd->add_subcommand("analyze", "Say which rank is missing from which collective, from the flight "
                                                  "records in DIR (<output_dir>/flight or TESSERA_FLIGHT_DIR)");
  auto flight_dir = std::make_shared<std::string>();
  analyze->add_option("dir", *flight_dir, "A directory of flight records (rank-*.json)")->required();
  auto* stacks = cmd->add_subcommand("stacks", "A live job's every thread's stack and flight records, from its "
                                                "launcher (what it reports by itself when the job is wedged)");
  auto job = std::make_shared<std::string>();
  auto wait_s = std::make_shared<int>(30);
  stacks->add_option("job", *job, "The launcher's pid, or the run's output directory")->required();
  stacks->add_option("--wait", *wait_s, "Seconds to wait for the launcher's report")->check(CLI::Range(1, 3600));
  return {cmd, [=]() -> int {
    if (stacks->parsed()) return print_live_stacks(*job, std::chrono::seconds(*wait_s));
    if (analyze->parsed()) {
      std::printf("%s", dist::analyze_flight_records(dist::read_flight_records(*flight_dir)).c_str());
      return 0;
    }
    namespace fs = std::filesystem;
    TESSERA_CHECK(fs::is_directory(*dir), "[trace] ", *dir, " is not a directory: give a run's <output_dir>/trace");
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(*dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("rank-", 0) == 0 && e.path().extension() == ".json") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    TESSERA_CHECK(!files.empty(), "[trace] ", *dir, " holds no rank-*.json: train with --trace first");
    const std::string out = output->empty() ? (fs::path(*dir) / "timeline.json").string() : *output;
    io::write_file_atomic(out, observe::merge_chrome_traces(files));
    std::printf("%s (%zu ranks; open it in https://ui.perfetto.dev or chrome://tracing)\n", out.c_str(), files.size());
    return 0;
  }};
}

}  // namespace tessera::cli
