// SurvivorSave: under the elastic agent, a data-parallel worker whose peer died writes the state it
// holds in memory as a checkpoint before it goes, so the next generation resumes from the last step
// every replica finished instead of from the last scheduled checkpoint (Horovod elastic keeps the
// state in memory the same way; here it crosses the restart through one file).
//
// The agent sends SIGUSR1 to the surviving workers when a generation ends by a failure. Their main
// thread is then blocked in a collective that can no longer complete; a thread of this class wakes
// (the handler writes to a pipe), runs `save` (which takes the trainer's state lock, so it never
// sees a half-applied optimizer step) and ends the process with kExitCode, leaving the stuck
// collective behind. A program that is not a tessera trainer dies of SIGUSR1's default action, as
// it would have of the agent's SIGKILL before.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace tessera::train {

class SurvivorSave {
 public:
  static constexpr int kExitCode = 75;  // EX_TEMPFAIL: "try again", the next generation will

  // Null unless this process runs under the elastic agent (TESSERA_ELASTIC_GENERATION is set).
  // `save` returns the checkpoint it wrote ("" when another survivor saves that step).
  static std::unique_ptr<SurvivorSave> from_environment(int rank, std::function<std::string()> save);
  ~SurvivorSave();
  SurvivorSave(const SurvivorSave&) = delete;
  SurvivorSave& operator=(const SurvivorSave&) = delete;

  // Runs `save` now and logs what it wrote (or why it failed), without ending the process: what the
  // trainer does when its own collective fails on the lost peer before the agent's SIGUSR1 arrives.
  void save_now();

 private:
  SurvivorSave(int rank, std::function<std::string()> save);
  void run();

  int rank_;
  std::function<std::string()> save_;
  int pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace tessera::train
