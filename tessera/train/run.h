// train::run: one process's part of a training job, the single entry `tessera train` calls (and a
// C++ program may): a parameter server when the launcher made this process one (ps_job.h), else a
// Trainer with the strategy the config chooses, resumed as asked, fitted, and its final evaluation
// and checkpoint printed by rank 0. Starting the processes is the launcher's job, not this one's.
#pragma once
#include <string>

#include "tessera/train/config.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

struct RunOptions {
  // "" (a fresh run), "latest" (this run's newest checkpoint), "auto" (the newest if there is one,
  // else a fresh run: what an elastic job's restarted workers use) or a checkpoint path.
  std::string resume;
  // Ctrl-C / SIGTERM mean "finish the step, checkpoint, stop" while fitting.
  bool stop_on_signals = true;
};

struct RunOutcome {
  FitResult fit;
  bool interrupted = false;  // stopped by a signal (not by train.max_steps)
  bool server = false;       // this process was a parameter server
};

RunOutcome run(const TrainConfig& config, const RunOptions& options = {});

}  // namespace tessera::train
