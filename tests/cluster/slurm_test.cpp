// Jobs under a real Slurm cluster (scripts/slurm.sh: slurmctld and a slurmd per test host, munge),
// started as HPC users start them: `srun` and `sbatch` from inside a host, no launcher of ours
// between Slurm and the ranks unless the job script runs one. Each host resolves the others' names
// and maps its own to 127.0.1.1, as a Debian machine does, so rank 0's store must not listen on the
// address its own name gives it. Skipped, with the reason, without root or without Slurm.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "tessera/io/checkpoint.h"
#include "testing/slurm_cluster.h"
#include "testing/state_compare.h"
#include "testing/temp_dir.h"
#include "testing/train_alone.h"

namespace tessera {
namespace {

using tessera::testing::read_text;
using tessera::testing::SlurmCluster;
using Clock = std::chrono::steady_clock;

const std::string kToken = "export TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef; ";

std::string write_config(const std::string& dir, int max_steps = 20) {
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [32, 16]\n"
                                      << "[data]\ndataset = \"synthetic\"\nsamples = 1024\ntest_samples = 128\nclasses = 4\n"
                                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.01\n"
                                      << "[train]\nepochs = 100000\nmax_steps = " << max_steps
                                      << "\nthreads = 1\nlog_every = 1\n"
                                      << "[distributed]\ntimeout_s = 20\n";
  return dir + "/config.toml";
}

struct ShellRun {
  int status = 0;
  std::string output;
};

// `line` as the bash script <dir>/<name>.sh, its output in <dir>/<name>.log.
ShellRun shell(const std::string& dir, const std::string& name, const std::string& line) {
  const std::string script = dir + "/" + name + ".sh", log = dir + "/" + name + ".log";
  std::ofstream(script) << line << "\n";
  const int status = std::system(("bash " + script + " > " + log + " 2>&1").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, read_text(log)};
}

// `srun ARGS tessera train CONFIG TRAIN_ARGS` from host 1, bounded.
ShellRun srun_train(const SlurmCluster& slurm, const std::string& dir, const std::string& name, const std::string& srun_args,
               const std::string& train_args, const std::string& before_tessera = "") {
  return shell(dir, name,
               kToken + "timeout -k 5 120 " +
                   slurm.in(1, "srun " + srun_args + " " + before_tessera + std::string(TESSERA_BINARY) + " train " +
                                   dir + "/config.toml " + train_args));
}

using tessera::testing::train_alone;

// `srun -N 2 -n 4` (2 tasks a node) and `srun -N 2 -n 3` (tasks placed unevenly by Slurm) train
// one DDP job each, equal to one process on the global batch within the DDP tests' 1e-5.
TEST(SlurmCluster, SrunStartsOneDdpJobEqualToOneProcess) {
  const std::string dir = tessera::testing::fresh_dir("slurm", "srun");
  SlurmCluster slurm(2, dir);
  SLURM_UP_OR_SKIP(slurm);
  write_config(dir);
  const nn::StateDict single = train_alone(dir, "single", "--set train.batch_size=24");
  for (int tasks : {4, 3}) {
    const std::string out = dir + "/srun-n" + std::to_string(tasks);
    ShellRun r = srun_train(slurm, dir, "srun-n" + std::to_string(tasks),
                       "-N 2 -n " + std::to_string(tasks) + (tasks == 4 ? " --ntasks-per-node=2" : "") +
                           " --kill-on-bad-exit=1",
                       "--set train.batch_size=" + std::to_string(24 / tasks) + " --set train.output_dir=" + out);
    ASSERT_EQ(r.status, 0) << r.output;
    const nn::StateDict across = io::load_checkpoint(out + "/checkpoints").model.tensors;
    EXPECT_LT(tessera::testing::max_state_difference(single, across), 1e-5) << tasks << " tasks\n" << r.output;
  }
}

// A step of several tasks missing what the contract needs stops with the variable's name, on every
// task, instead of training a world of one per task; `tessera train` run by the batch script itself
// (no step of tasks) trains as one process and says so.
TEST(SlurmCluster, MissingOrInconsistentVariablesEndTheStepNamingThem) {
  const std::string dir = tessera::testing::fresh_dir("slurm", "contract");
  SlurmCluster slurm(2, dir);
  SLURM_UP_OR_SKIP(slurm);
  write_config(dir);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"env -u SLURM_NODEID ", "SLURM_NODEID is not set"},
      {"env -u TESSERA_JOB_TOKEN ", "TESSERA_JOB_TOKEN is not set"},
      {"env SLURM_STEP_NODELIST=host[1-3] ", "names 3 nodes but SLURM_STEP_NUM_NODES=2"},
      {"env SLURM_PROCID=7 ", "SLURM_PROCID=7 is out of range"},
  };
  int n = 0;
  for (const auto& [wrapper, message] : cases) {
    ShellRun r = srun_train(slurm, dir, "bad" + std::to_string(n++), "-N 2 -n 2",
                       "--set train.output_dir=" + dir + "/bad", wrapper);
    EXPECT_NE(r.status, 0) << r.output;
    // Both tasks say it (a configuration error: exit status 3), and neither trained.
    size_t said = 0;
    for (size_t at = r.output.find(message); at != std::string::npos; at = r.output.find(message, at + 1)) ++said;
    EXPECT_EQ(said, 2u) << message << "\n" << r.output;
    EXPECT_EQ(r.output.find(" loss "), std::string::npos) << r.output;
  }
  ShellRun batch = shell(dir, "batch",
                    kToken + "timeout -k 5 120 " +
                        slurm.in(1, "sbatch --wait -N 2 --ntasks-per-node=1 -o " + dir + "/batch-%j.out --wrap \"" +
                                        std::string(TESSERA_BINARY) + " train " + dir + "/config.toml\"") +
                        "; status=$?; cat " + dir + "/batch-*.out; exit $status");
  EXPECT_EQ(batch.status, 0) << batch.output;
  EXPECT_NE(batch.output.find("batch script of a Slurm job of 2 tasks, not under srun: it trains as ONE process"),
            std::string::npos)
      << batch.output;
}

// The example job scripts, submitted with sbatch as a user would (`--wait`), each bounded: DDP with one
// process per task, parameter servers with one `tessera run` per node, and the elastic agents.
TEST(SlurmCluster, TheSbatchExamplesRunToCompletion) {
  const std::string dir = tessera::testing::fresh_dir("slurm", "sbatch");
  SlurmCluster slurm(2, dir);
  SLURM_UP_OR_SKIP(slurm);
  write_config(dir);
  const std::string env = kToken + "export TESSERA=" + std::string(TESSERA_BINARY) + " CONFIG=" + dir + "/config.toml; ";
  const std::string ps_config = dir + "/ps.toml";
  std::ofstream(ps_config) << read_text(dir + "/config.toml")
                           << "strategy = \"ps\"\nps_mode = \"sync\"\n";
  for (const std::string example : {"train_ddp", "train_ps", "train_elastic"}) {
    const std::string script = std::string(TESSERA_SOURCE_DIR) + "/examples/slurm/" + example + ".sbatch";
    const std::string config = example == "train_ps" ? "export CONFIG=" + ps_config + "; " : "";
    ShellRun r = shell(dir, example,
                  env + config + "timeout -k 5 180 " +
                      slurm.in(1, "sbatch --wait --parsable " + script + " --set train.max_steps=12") +
                      "; status=$?; cat " + dir + "/tessera-*.out; rm -f " + dir + "/tessera-*.out; exit $status");
    EXPECT_EQ(r.status, 0) << example << "\n" << r.output;
    // Every job trained its 12 steps and saved them.
    EXPECT_NE(r.output.find("step 12"), std::string::npos) << example << "\n" << r.output;
  }
}

// scancel of a running job ends every task on every node; a task killed with SIGKILL ends the step
// (--kill-on-bad-exit) with Slurm's report naming it. Neither waits for a timeout.
TEST(SlurmCluster, ScancelAndAKilledTaskEndTheJobWithoutAHang) {
  const std::string dir = tessera::testing::fresh_dir("slurm", "faults");
  SlurmCluster slurm(2, dir);
  SLURM_UP_OR_SKIP(slurm);
  write_config(dir, 1000000);
  const std::string config = dir + "/config.toml";
  // Polls `condition` (a shell line) every 100 ms for at most `seconds`.
  auto eventually = [&](const std::string& condition, int seconds) {
    const std::string script = dir + "/condition-" + std::to_string(std::hash<std::string>{}(condition)) + ".sh";
    std::ofstream(script) << condition << "\n";
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      if (std::system(("bash " + script + " > /dev/null 2>&1").c_str()) == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  const std::string tasks_alive = "pgrep -f \"train " + config + "\"";

  // scancel: submit, wait for a step, cancel, and every task is gone.
  ShellRun submit = shell(dir, "submit",
                     kToken + slurm.in(1, "sbatch --parsable -N 2 --ntasks-per-node=2 -o " + dir + "/long.out --wrap \"srun " +
                                              std::string(TESSERA_BINARY) + " train " + config + " --set train.batch_size=8"
                                              " --set train.output_dir=" + dir + "/long\""));
  ASSERT_EQ(submit.status, 0) << submit.output;
  const std::string job = submit.output.substr(0, submit.output.find_first_not_of("0123456789"));
  ASSERT_TRUE(eventually("grep -q \"step 5\" " + dir + "/long.out", 60)) << read_text(dir + "/long.out");
  const auto cancelled = Clock::now();
  ASSERT_EQ(std::system(slurm.in(1, "scancel " + job).c_str()), 0);
  EXPECT_TRUE(eventually("! " + tasks_alive, 30)) << read_text(dir + "/long.out");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - cancelled).count(), 30.0);

  // SIGKILL of one task (the newest tessera process) in an srun step: the step ends, naming the task.
  const std::string line = kToken + "timeout -k 5 120 " +
                           slurm.in(1, "srun -N 2 -n 4 --ntasks-per-node=2 --kill-on-bad-exit=1 " +
                                           std::string(TESSERA_BINARY) + " train " + config +
                                           " --set train.batch_size=8 --set train.output_dir=" + dir + "/killed");
  std::thread killer([&] {
    // The newest task's process: the tessera binary itself, not srun or the shell lines around it.
    if (eventually("grep -q \"step 20 \" " + dir + "/killed.log", 60))
      std::system(("pkill -KILL -n -f \"^" + std::string(TESSERA_BINARY) + " train .*/killed$\"").c_str());
  });
  const auto started = Clock::now();
  ShellRun killed = shell(dir, "killed", line);
  killer.join();
  EXPECT_NE(killed.status, 0) << killed.output;
  EXPECT_NE(killed.output.find("Killed"), std::string::npos) << killed.output;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - started).count(), 90.0) << killed.output;
  EXPECT_TRUE(eventually("! " + tasks_alive, 30));
}

// A node lost mid-run (every process in its host killed, slurmd too): a DDP step ends within the
// collective timeout with the lost ranks named.
TEST(SlurmCluster, ALostNodeEndsADdpStepNamingItsRanks) {
  const std::string dir = tessera::testing::fresh_dir("slurm", "lost");
  SlurmCluster slurm(2, dir);
  SLURM_UP_OR_SKIP(slurm);
  write_config(dir, 1000000);
  const std::string step_line = kToken + "timeout -k 5 120 " +
                                slurm.in(1, "srun -N 2 -n 4 --ntasks-per-node=2 --kill-on-bad-exit=1 " +
                                                std::string(TESSERA_BINARY) + " train " + dir + "/config.toml" +
                                                " --set train.batch_size=8 --set train.output_dir=" + dir + "/ddp");
  const std::string kill_host2 = "for i in $(seq 600); do grep -q \"step 20 \" " + dir +
                                 "/ddp.log 2>/dev/null && break; sleep 0.1; done; " + slurm.hosts("kill host2");
  const auto started = Clock::now();
  ShellRun ddp = shell(dir, "ddp", "(" + kill_host2 + ") & " + step_line + "; status=$?; wait; exit $status");
  EXPECT_NE(ddp.status, 0) << ddp.output;
  EXPECT_NE(ddp.output.find("on host2"), std::string::npos) << ddp.output;  // the lost ranks, named
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - started).count(), 90.0) << ddp.output;
}

// The elastic job script (--no-kill) goes on with the node that is left after one is lost: its
// agents' new generation resumes from the survivors' state and finishes the steps.
TEST(SlurmCluster, TheElasticJobScriptGoesOnAfterALostNode) {
  const std::string dir = tessera::testing::fresh_dir("slurm", "elastic");
  SlurmCluster slurm(2, dir);
  SLURM_UP_OR_SKIP(slurm);
  write_config(dir, 600);
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/examples/slurm/train_elastic.sbatch";
  // Rank 0 slowed by 20 ms a step in the first generation, so that the loss comes mid-run.
  const std::string submit = kToken + "export TESSERA=" + std::string(TESSERA_BINARY) + " CONFIG=" + dir +
                             "/config.toml; timeout -k 5 180 " +
                             slurm.in(1, "sbatch --wait -o " + dir + "/elastic.out " + script +
                                             " --set train.checkpoint_every=5 --set distributed.debug_slow_rank=0"
                                             " --set distributed.debug_slow_ms=20");
  const std::string kill_host2 = "for i in $(seq 600); do grep -q \"step 20 \" " + dir +
                                 "/elastic.out 2>/dev/null && break; sleep 0.1; done; " + slurm.hosts("kill host2");
  ShellRun r = shell(dir, "elastic", "(" + kill_host2 + ") & " + submit + "; status=$?; wait; exit $status");
  const std::string out = read_text(dir + "/elastic.out");
  EXPECT_EQ(r.status, 0) << r.output << out;
  EXPECT_NE(out.find("2 agent(s), 2 worker(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("1 agent(s), 1 worker(s)"), std::string::npos) << out;  // the new generation on host1
  EXPECT_NE(out.find("step 600 "), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
