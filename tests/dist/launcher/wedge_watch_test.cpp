// The wedge watch's parts: the progress record both processes read (progress_file.h), the frames
// of a stack tool's output, and the watch's decision: a report once per silence longer than
// factor × the median step, never while a rank evaluates or saves.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/dist/launcher/process_stacks.h"
#include "tessera/dist/launcher/progress_file.h"
#include "tessera/dist/launcher/wedge_watch.h"
#include "tessera/util/clock.h"
#include "testing/temp_dir.h"

namespace tessera::dist::launcher {
namespace {

using Phase = ProgressRecord::Phase;

TEST(ProgressFile, ARecordReadsBackAndAnythingElseIsNone) {
  const std::string text = format_progress({42, Phase::Step, 1700000000123456, 2500, 4321, "/runs/a/flight"});
  ASSERT_EQ(text.size(), kProgressRecordSize);
  const auto back = parse_progress(text);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->steps, 42);
  EXPECT_EQ(back->phase, Phase::Step);
  EXPECT_EQ(back->unix_us, 1700000000123456);
  EXPECT_EQ(back->median_step_us, 2500);
  EXPECT_EQ(back->pid, 4321);
  EXPECT_EQ(back->flight_dir, "/runs/a/flight");
  EXPECT_FALSE(back->live);
  // A live job's record says so: the launcher keeps its peers when this worker is lost.
  EXPECT_TRUE(parse_progress(format_progress({42, Phase::Step, 5, 0, 1, "/f", true}))->live);
  // A flight directory with a space, or too long to fit, is left out rather than cut.
  EXPECT_EQ(parse_progress(format_progress({1, Phase::Other, 5, 0, 1, "/a b"}))->flight_dir, "");
  EXPECT_EQ(parse_progress(format_progress({1, Phase::Done, 5, 0, 1, std::string(600, 'x')}))->flight_dir, "");
  EXPECT_EQ(parse_progress(format_progress({1, Phase::Done, 5, 0, 1, ""}))->phase, Phase::Done);
  for (std::string bad : {std::string(), text.substr(1), std::string(kProgressRecordSize, ' ')}) {
    EXPECT_FALSE(parse_progress(bad).has_value()) << "'" << bad << "'";
  }
  std::string wrong_phase = text;
  wrong_phase.replace(wrong_phase.find("step"), 4, "stop");
  EXPECT_FALSE(parse_progress(wrong_phase).has_value());
  std::string negative = format_progress({1, Phase::Step, 5, 0, 1, ""});
  negative[0] = '-';
  EXPECT_FALSE(parse_progress(negative).has_value());
}

// The trainer's side measures its own steps: from one record between steps to the next with more
// steps, never across evaluation or a save.
TEST(ProgressFile, TheWriterRecordsTheMedianOfItsOwnSteps) {
  const std::string path = tessera::testing::fresh_dir("ProgressFile", "writer") + "/rank-0.progress";
  ::setenv("TESSERA_PROGRESS_FILE", path.c_str(), 1);
  auto writer = ProgressWriter::from_environment();
  ::unsetenv("TESSERA_PROGRESS_FILE");
  ASSERT_NE(writer, nullptr);
  writer->set_flight_dir("/runs/b/flight");
  writer->write(0, Phase::Step);
  EXPECT_EQ(read_progress_file(path)->median_step_us, 0);
  writer->write(0, Phase::Other);  // evaluating: no step measured across it
  writer->write(0, Phase::Step);
  EXPECT_EQ(read_progress_file(path)->median_step_us, 0);
  writer->write(1, Phase::Step);
  const auto record = read_progress_file(path);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->steps, 1);
  EXPECT_GE(record->median_step_us, 1);
  EXPECT_EQ(record->flight_dir, "/runs/b/flight");
  EXPECT_EQ(ProgressWriter::from_environment(), nullptr);  // not under a launcher
}

TEST(ProcessStacks, TheFramesOfOneThreadWithoutTheirAddresses) {
  const std::string stacks =
      "PID 10 - process\nTID 10:\n#0  0x00007f0000000001 __futex_abstimed_wait_common\n"
      "#1  0x00007f0000000002 tessera::train::Trainer::fit()\n#2  0x0000000000401000\nTID 11:\n"
      "#0  0x00007f0000000003 epoll_wait\n";
  EXPECT_EQ(thread_frames(stacks, 10, 12), "#0 __futex_abstimed_wait_common\n#1 tessera::train::Trainer::fit()\n#2 ??\n");
  EXPECT_EQ(thread_frames(stacks, 10, 1), "#0 __futex_abstimed_wait_common\n");
  EXPECT_EQ(thread_frames(stacks, 11, 12), "#0 epoll_wait\n");
  EXPECT_EQ(thread_frames(stacks, 12, 12), "");
}

// A child that waits in pause() until it is killed.
struct PausedChild {
  pid_t pid = ::fork();
  PausedChild() {
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      std::signal(SIGUSR2, [](int) {});  // catches SIGUSR2, as a trainer does
      for (;;) ::pause();
    }
  }
  ~PausedChild() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

void write_record(const std::string& path, int64_t steps, Phase phase, int64_t unix_us, int64_t median_us) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << format_progress({steps, phase, unix_us, median_us, 0, ""});
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST(WedgeWatch, ReportsOnceASilenceLongerThanTheFactorTimesTheMedianStepAndNeverDuringEvaluation) {
  const std::string dir = tessera::testing::fresh_dir("WedgeWatch", "silence");
  PausedChild child;
  WedgeOptions options;
  options.min_seconds = 0.5;
  options.in_background = false;  // the report is there when poll() returns
  WedgeWatch watch(options, dir, /*notices_fd=*/2);
  const std::string progress = dir + "/rank-0.progress";
  watch.watch({0, child.pid, progress});
  const int64_t now = unix_micros();
  // Steps 1 and 2, 5 s ago, the worker's median step 0.1 s: the job has been silent for 50 of them.
  write_record(progress, 1, Phase::Step, now - 5100000, 0);
  watch.poll();
  EXPECT_FALSE(watch.median_step_seconds().has_value());
  write_record(progress, 2, Phase::Step, now - 5000000, 100000);
  watch.poll();
  ASSERT_TRUE(watch.median_step_seconds().has_value());
  EXPECT_NEAR(*watch.median_step_seconds(), 0.1, 1e-6);
  const std::string report = dir + "/report.txt";
  ASSERT_NE(inode_of(report), 0u) << "no report after 5 s of silence at a 0.1 s median step";
  const std::string text = tessera::testing::read_text(report);
  EXPECT_NE(text.find("[wedge] no rank finished a training step for 5."), std::string::npos) << text;
  // Its state (sleeping, or running on its way into pause()) and its last step.
  EXPECT_NE(text.find("rank 0 (pid " + std::to_string(child.pid) + "): "), std::string::npos) << text;
  EXPECT_NE(text.find("; last step 2, 5."), std::string::npos) << text;
  EXPECT_NE(text.find("every thread's stack: " + dir + "/wedge-"), std::string::npos) << text;
  // The same silence is reported once.
  const ino_t first = inode_of(report);
  watch.poll();
  EXPECT_EQ(inode_of(report), first);
  // Evaluating (or saving) for as long as it takes is not a wedge.
  write_record(progress, 2, Phase::Other, now - 4000000, 100000);
  watch.poll();
  EXPECT_EQ(inode_of(report), first);
  // Back between steps and silent again: a new report.
  write_record(progress, 3, Phase::Step, now - 3000000, 100000);
  watch.poll();
  const ino_t second = inode_of(report);
  EXPECT_NE(second, first);
  // Training ended ("done"): the process is finishing, not wedged.
  write_record(progress, 3, Phase::Done, now - 2000000, 100000);
  watch.poll();
  EXPECT_EQ(inode_of(report), second);
  // A reaped worker is forgotten: nothing is watched, nothing reported.
  write_record(progress, 4, Phase::Step, now - 1000000, 100000);
  watch.forget(child.pid);
  watch.poll();
  EXPECT_EQ(inode_of(report), second);
}

TEST(WedgeWatch, ASilenceShorterThanTheFloorIsNotAWedge) {
  const std::string dir = tessera::testing::fresh_dir("WedgeWatch", "floor");
  PausedChild child;
  WedgeOptions options;
  options.min_seconds = 60;  // 0.1 s steps, 5 s silent: 50 medians, but under the floor
  options.in_background = false;
  WedgeWatch watch(options, dir, 2);
  const std::string progress = dir + "/rank-0.progress";
  watch.watch({0, child.pid, progress});
  const int64_t now = unix_micros();
  write_record(progress, 2, Phase::Step, now - 5000000, 100000);
  watch.poll();
  EXPECT_EQ(inode_of(dir + "/report.txt"), 0u);
}

}  // namespace
}  // namespace tessera::dist::launcher
