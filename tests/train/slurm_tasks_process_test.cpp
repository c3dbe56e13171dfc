// `tessera train` started as the tasks of a Slurm step, without Slurm: each process gets the
// variables srun would set (one node, loopback), so what slurm_job.h does — the contract read from
// them, rank 0 hosting the store and keeping it until the other task has left — runs in every build,
// under the sanitizers too, without root. The real srun is tested on a Slurm cluster
// (tests/cluster/slurm_test.cpp).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tessera/io/checkpoint.h"
#include "testing/state_compare.h"
#include "testing/temp_dir.h"
#include "testing/train_alone.h"

namespace tessera {
namespace {

using tessera::testing::read_text;

std::string write_config(const std::string& dir) {
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [32, 16]\n"
                                      << "[data]\ndataset = \"synthetic\"\nsamples = 1024\ntest_samples = 128\nclasses = 4\n"
                                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.01\n"
                                      << "[train]\nepochs = 1\nmax_steps = 20\nthreads = 1\nlog_every = 100\n"
                                      << "[distributed]\ntimeout_s = 30\n";
  return dir + "/config.toml";
}

// The variables srun sets in task `rank` of a 2-task step on one node, as an `env` prefix.
std::string task_env(int rank, const std::string& job) {
  const std::string r = std::to_string(rank);
  return "env -u RANK -u WORLD_SIZE -u TESSERA_ROLE SLURM_JOB_ID=" + job + " SLURM_STEP_ID=0 SLURM_NTASKS=2 " +
         "SLURM_PROCID=" + r + " SLURM_LOCALID=" + r + " SLURM_NODEID=0 SLURM_NNODES=1 " +
         "SLURM_STEP_NODELIST=localhost SLURM_STEP_TASKS_PER_NODE=2 TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef ";
}

TEST(SlurmTasks, TwoTasksOfAStepTrainAsOneJobEqualToOneProcess) {
  const std::string dir = tessera::testing::fresh_dir("slurm_tasks", "two");
  const std::string config = write_config(dir);
  const std::string bin = TESSERA_BINARY;
  const nn::StateDict single = tessera::testing::train_alone(dir, "single", "--set train.batch_size=24");
  // A job id of this process's own, so that its port (slurm_port) is not another test's.
  const std::string job = std::to_string(::getpid());
  std::string script;
  for (int rank = 0; rank < 2; ++rank)
    script += "timeout -k 5 120 " + task_env(rank, job) + bin + " train " + config +
              " --set train.batch_size=12 --set train.output_dir=" + dir + "/tasks > " + dir + "/task" +
              std::to_string(rank) + ".log 2>&1 & p" + std::to_string(rank) + "=$!; ";
  script += "wait $p0; a=$?; wait $p1; b=$?; echo \"exit $a $b\"";
  std::ofstream(dir + "/tasks.sh") << script << "\n";
  std::system(("bash " + dir + "/tasks.sh > " + dir + "/tasks.log 2>&1").c_str());
  const std::string logs = read_text(dir + "/tasks.log") + read_text(dir + "/task0.log") + read_text(dir + "/task1.log");
  // Both tasks exit cleanly: rank 0 kept the store until the other had left it.
  ASSERT_NE(logs.find("exit 0 0"), std::string::npos) << logs;
  const nn::StateDict tasks = io::load_checkpoint(dir + "/tasks/checkpoints").model.tensors;
  EXPECT_LT(tessera::testing::max_state_difference(single, tasks), 1e-5) << logs;
}

TEST(SlurmTasks, ATaskWithoutTheTokenOrWithAMissingVariableStopsNamingIt) {
  const std::string dir = tessera::testing::fresh_dir("slurm_tasks", "bad");
  const std::string config = write_config(dir);
  const std::string bin = TESSERA_BINARY;
  const std::string job = std::to_string(::getpid() + 1);
  for (const auto& [unset, message] : {std::pair<std::string, std::string>{"TESSERA_JOB_TOKEN", "TESSERA_JOB_TOKEN is not set"},
                                       {"SLURM_LOCALID", "SLURM_LOCALID is not set"}}) {
    const int status = std::system(("timeout -k 5 60 " + task_env(0, job) + "env -u " + unset + " " + bin + " train " +
                                    config + " --set train.output_dir=" + dir + "/out > " + dir + "/bad.log 2>&1")
                                       .c_str());
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 3) << read_text(dir + "/bad.log");  // a config error
    EXPECT_NE(read_text(dir + "/bad.log").find(message), std::string::npos) << read_text(dir + "/bad.log");
  }
}

}  // namespace
}  // namespace tessera
