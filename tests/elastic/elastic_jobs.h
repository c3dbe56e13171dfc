// What the elastic and live-membership job tests share: the job's config, the agent's command
// line, a bounded shell run, and readers of the run's checkpoints and metrics.
#pragma once
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "tessera/io/checkpoint.h"
#include "testing/expect.h"
#include "testing/listen_port.h"
#include "testing/temp_dir.h"

namespace tessera::elastic_jobs {

// 2 epochs of 40 global batches of 12, checkpoints every 5 steps. `live`: distributed.live_membership;
// "off" tests the restart path (the survivors' save, a new generation), which live membership
// replaces for DDP and ZeRO-1/2 jobs. `distributed`: more lines of [distributed] (the strategy).
inline std::string write_config(const std::string& dir, int64_t samples = 480, const std::string& live = "off",
                                const std::string& distributed = "") {
  std::string path = dir + "/config.toml";
  std::ofstream(path) << "[model]\nname = \"mlp\"\nhidden = [32]\n"
                      << "[data]\ndataset = \"synthetic\"\nsamples = " << samples
                      << "\ntest_samples = 64\nclasses = 4\n"
                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.02\n"
                      << "[train]\nepochs = 2\nglobal_batch_size = 12\ncheckpoint_every = 5\nthreads = 1\n"
                      << "log_every = 1000\noutput_dir = \"" << dir << "/run\"\n"
                      << "[distributed]\ntimeout_s = 30\nlive_membership = \"" << live << "\"\n" << distributed;
  return path;
}

// The agent command line; `extra` goes before `--`, `train_extra` to tessera train.
inline std::string agent(const std::string& dir, const std::string& nnodes, int nproc, const std::string& backend,
                  const std::string& endpoint, const std::string& extra, const std::string& train_extra) {
  return std::string(TESSERA_BINARY) + " run --nnodes " + nnodes + " --nproc-per-node " + std::to_string(nproc) +
         " --rdzv-backend " + backend + " --rdzv-endpoint " + endpoint + " --rdzv-id test --grace-period 2 " +
         "--heartbeat-timeout 3 " + extra + " -- " + TESSERA_BINARY + " train " + dir + "/config.toml --resume auto " +
         train_extra;
}

struct Outcome {
  int status = 0;
  std::string log;
};

// Runs `script` with bash, bounded: a job that hangs is killed after 10 minutes (status 124) and
// fails the test's assertions rather than hanging it.
inline Outcome run_shell(const std::string& script, const std::string& log) {
  Outcome o;
  const std::string file = log + ".sh";
  std::ofstream(file) << script << "\n";
  int status = std::system(("timeout -k 10 600 bash " + file + " > " + log + " 2>&1").c_str());
  o.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.log = tessera::testing::read_text(log);
  return o;
}

// Below the ephemeral range: the agents race to bind it, and no outgoing connection may hold it
// meanwhile (testing/listen_port.h).
inline std::string endpoint() { return "127.0.0.1:" + std::to_string(tessera::testing::free_listen_port()); }

inline int64_t final_step(const std::string& dir, const std::string& run = "run") {
  return io::latest_checkpoint_step(dir + "/" + run + "/checkpoints");
}

// The final model of <dir>/<run>.
inline nn::StateDict final_model(const std::string& dir, const std::string& run) {
  return io::load_checkpoint(dir + "/" + run + "/checkpoints").model.tensors;
}

// Each step's loss in <dir>/<run>/metrics.jsonl (a step written twice, by two generations, keeps the last).
inline std::map<int64_t, double> step_losses(const std::string& dir, const std::string& run) {
  std::map<int64_t, double> losses;
  std::istringstream in(tessera::testing::read_text(dir + "/" + run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_discarded() && record.value("type", "") == "step") losses[record["step"]] = record["loss"];
  }
  return losses;
}

}  // namespace tessera::elastic_jobs
