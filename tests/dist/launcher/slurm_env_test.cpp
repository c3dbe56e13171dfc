// The Slurm contract (launcher/slurm_env.h): the compressed host list and tasks-per-node syntax on
// tables of cases, good and bad, and a step's variables read as a worker's env contract, with every
// missing or inconsistent variable named rather than a silent world of one.
#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/slurm_env.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::dist::launcher;
using tessera::testing::expect_error;

namespace {

using Hosts = std::vector<std::string>;

// What srun sets in task 3 of `srun -N 2 -n 4` (2 tasks per node) in job 4242, step 0.
std::map<std::string, std::string> task_three() {
  return {{"SLURM_JOB_ID", "4242"},         {"SLURM_STEP_ID", "0"},
          {"SLURM_NTASKS", "4"},            {"SLURM_PROCID", "3"},
          {"SLURM_LOCALID", "1"},           {"SLURM_NODEID", "1"},
          {"SLURM_NNODES", "2"},            {"SLURM_JOB_NODELIST", "node[07-08]"},
          {"SLURM_STEP_NODELIST", "node[07-08]"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"TESSERA_JOB_TOKEN", "00112233445566778899aabbccddeeff"}};
}

}  // namespace

TEST(SlurmHostList, ExpandsEveryFormSlurmWrites) {
  const std::vector<std::pair<std::string, Hosts>> cases = {
      {"node1", {"node1"}},
      {"node[1-3]", {"node1", "node2", "node3"}},
      {"node[01-04,07]", {"node01", "node02", "node03", "node04", "node07"}},
      {"node[9-11]", {"node9", "node10", "node11"}},
      {"node[098-101]", {"node098", "node099", "node100", "node101"}},
      {"a[1-2],b,c[5]", {"a1", "a2", "b", "c5"}},
      {"rack[1-2]-n[1-2]", {"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
      {"gpu[3,1]-x", {"gpu3-x", "gpu1-x"}},
      {"host1,host2", {"host1", "host2"}},
      {"n[0-0]", {"n0"}},
  };
  for (const auto& [list, hosts] : cases) EXPECT_EQ(expand_host_list(list), hosts) << list;
}

TEST(SlurmHostList, MalformedListsAreRefusedNamingTheVariableAndTheText) {
  const std::vector<std::pair<std::string, const char*>> cases = {
      {"", "empty host name"},
      {"a,,b", "empty host name"},
      {"node[1-3", "without its ']'"},
      {"node1-3]", "without its '['"},
      {"node[[1]]", "inside brackets"},
      {"node[]", "empty brackets"},
      {"node[3-1]", "runs backwards"},
      {"node[a-b]", "is not a number"},
      {"node[1-]", "is not a number"},
      {"node[1,,2]", "is not a number"},
      {"node[0-99999999]", "more than 65536 hosts"},
      {"a[0-999]-b[0-999]", "more than 65536 hosts"},
      {std::string(256, 'n'), "more than 255 characters"},
      // Zero-padded ranges: few hosts, but each name long; fuzz_slurm_env's 672-byte list of these grew to 1.6 GB.
      {"n[" + std::string(260, '0') + "1-" + std::string(260, '0') + "9]x", "more than 255 characters"},
      {"a[" + std::string(130, '0') + "1-2]b[" + std::string(130, '0') + "1-2]", "more than 255 characters"},
  };
  for (const auto& [list, why] : cases)
    expect_error<ValueError>([&] { expand_host_list(list, "SLURM_STEP_NODELIST"); },
                             {"SLURM_STEP_NODELIST", why});
}

TEST(SlurmTasksPerNode, ExpandsRepeatsAndRefusesBadText) {
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(expand_tasks_per_node("1,3(x2)"), (std::vector<int>{1, 3, 3}));
  for (const char* bad : {"", "2(x)", "2(3)", "x2", "0", "2(x0)", "2(x3", "-1"})
    expect_error<ValueError>([&] { expand_tasks_per_node(bad); }, {"SLURM_TASKS_PER_NODE"});
}

TEST(SlurmPort, IsTheSameForAStepAndDiffersBetweenJobsAndSteps) {
  EXPECT_EQ(slurm_port(4242, 0), slurm_port(4242, 0));
  EXPECT_NE(slurm_port(4242, 0), slurm_port(4243, 0));
  EXPECT_NE(slurm_port(4242, 0), slurm_port(4242, 1));
  for (long long job : {0LL, 1LL, 9999LL, 123456789LL})
    for (long long step : {0LL, 3LL, 4294967294LL}) {
      EXPECT_GE(slurm_port(job, step), 20000);
      EXPECT_LT(slurm_port(job, step), 30000);
    }
}

TEST(SlurmStep, ATaskOfSrunReadsAsTheEnvContract) {
  auto step = slurm_step_from_variables(task_three());
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(step->rank, 3);
  EXPECT_EQ(step->local_tasks, 2);
  EXPECT_EQ(step->nodes, (Hosts{"node07", "node08"}));
  WorkerEnv env = worker_env_from_slurm(*step, task_three());
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.master_addr, "node07");
  EXPECT_EQ(env.master_port, slurm_port(4242, 0));
  EXPECT_EQ(env.job_token, "00112233445566778899aabbccddeeff");
  // And it passes the contract's own checks.
  EXPECT_EQ(worker_env_from_variables(to_variables(env)), env);
}

TEST(SlurmStep, MasterAddressAndPortGivenInTheEnvironmentWin) {
  auto v = task_three();
  v["MASTER_ADDR"] = "198.18.0.9";
  v["MASTER_PORT"] = "29555";
  WorkerEnv env = worker_env_from_slurm(*slurm_step_from_variables(v), v);
  EXPECT_EQ(env.master_addr, "198.18.0.9");
  EXPECT_EQ(env.master_port, 29555);
}

TEST(SlurmStep, AStepUsesItsOwnNodesAndCountsBeforeTheJobs) {
  // `srun -N 2 -n 2` inside a 3-node allocation: the step's list, not the job's.
  auto v = task_three();
  v["SLURM_JOB_NODELIST"] = "node[05-08]";
  v["SLURM_NNODES"] = "4";
  v["SLURM_NTASKS"] = "8";
  v["SLURM_STEP_NUM_NODES"] = "2";
  v["SLURM_STEP_NUM_TASKS"] = "4";
  auto step = slurm_step_from_variables(v);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(step->ntasks, 4);
  EXPECT_EQ(step->nnodes, 2);
  EXPECT_EQ(step->nodes.front(), "node07");
}

TEST(SlurmStep, OutsideSlurmOrWithOneTaskItIsNoJob) {
  EXPECT_FALSE(slurm_step_from_variables({}).has_value());
  EXPECT_FALSE(slurm_step_from_variables({{"SLURM_JOB_ID", "7"}}).has_value());
  EXPECT_FALSE(slurm_step_from_variables({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "1"}}).has_value());
}

TEST(SlurmStep, EveryMissingVariableIsNamed) {
  for (const char* name : {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES"}) {
    auto v = task_three();
    v.erase(name);
    expect_error<ValueError>([&] { slurm_step_from_variables(v); }, {name, "is not set", "world of one"});
  }
  auto v = task_three();
  v.erase("SLURM_STEP_NODELIST");
  v.erase("SLURM_JOB_NODELIST");
  expect_error<ValueError>([&] { slurm_step_from_variables(v); }, {"nor SLURM_JOB_NODELIST is set", "world of one"});
  v = task_three();
  v.erase("SLURM_STEP_TASKS_PER_NODE");
  expect_error<ValueError>([&] { slurm_step_from_variables(v); }, {"nor SLURM_TASKS_PER_NODE is set", "world of one"});
  v = task_three();
  v.erase("TESSERA_JOB_TOKEN");
  expect_error<ValueError>([&] { worker_env_from_slurm(*slurm_step_from_variables(v), v); },
                           {"TESSERA_JOB_TOKEN is not set", "export TESSERA_JOB_TOKEN"});
}

TEST(SlurmStep, InconsistentVariablesAreRefused) {
  const std::vector<std::tuple<const char*, const char*, const char*>> cases = {
      {"SLURM_PROCID", "4", "SLURM_PROCID=4 is out of range"},
      {"SLURM_PROCID", "x", "SLURM_PROCID='x' is not an integer"},
      {"SLURM_NODEID", "2", "SLURM_NODEID=2 is out of range"},
      {"SLURM_NNODES", "3", "names 2 nodes but SLURM_NNODES=3"},
      {"SLURM_STEP_NODELIST", "node[1-3]", "names 3 nodes but SLURM_NNODES=2"},
      // 3 + 1 tasks add up, but task 3 is then the only one on node 1: SLURM_LOCALID=1 cannot be.
      {"SLURM_STEP_TASKS_PER_NODE", "3,1", "SLURM_LOCALID=1 is out of range [0, 0]"},
      {"SLURM_STEP_TASKS_PER_NODE", "2(x3)", "gives 6 tasks on 3 nodes"},
      {"SLURM_LOCALID", "2", "SLURM_LOCALID=2 is out of range"},
      {"SLURM_NTASKS", "0", "SLURM_NTASKS=0 is out of range"},
  };
  for (const auto& [name, value, why] : cases) {
    auto v = task_three();
    v[name] = value;
    expect_error<ValueError>([&] { slurm_step_from_variables(v); }, {why});
  }
}

TEST(SlurmStep, TheBatchScriptAndSlurmsOwnStepsAreNoStepOfTasks) {
  // The batch script has no SLURM_STEP_ID (or, by version, one of Slurm's own ids, all at or above
  // 0xfffffff0: batch 0xfffffffb, extern 0xfffffffc, interactive 0xfffffffa, before 20.11 batch
  // 0xfffffffe): one process there, which says so when the job has several tasks.
  auto v = task_three();
  v.erase("SLURM_STEP_ID");
  EXPECT_FALSE(slurm_step_from_variables(v).has_value());
  EXPECT_EQ(slurm_batch_script_tasks(v), 4);
  for (const char* id : {"4294967291", "4294967292", "4294967290", "4294967294", "4294967280"}) {
    v["SLURM_STEP_ID"] = id;
    EXPECT_FALSE(slurm_step_from_variables(v).has_value()) << id;
    EXPECT_EQ(slurm_batch_script_tasks(v), 4) << id;
  }
  v["SLURM_STEP_ID"] = "4294967279";  // the largest normal step
  EXPECT_TRUE(slurm_step_from_variables(v).has_value());
  EXPECT_EQ(slurm_batch_script_tasks(v), 0);
  EXPECT_EQ(slurm_batch_script_tasks(task_three()), 0);
  EXPECT_EQ(slurm_batch_script_tasks({}), 0);
}

TEST(SlurmLauncherPlace, OneLauncherPerNodeFindsItsNodeAndMaster) {
  auto v = task_three();
  v["SLURM_NTASKS"] = "2", v["SLURM_PROCID"] = "1", v["SLURM_LOCALID"] = "0",
  v["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)";
  SlurmLauncherPlace place = launcher_place_from_slurm(*slurm_step_from_variables(v), v);
  EXPECT_EQ(place.nnodes, 2);
  EXPECT_EQ(place.node_rank, 1);
  EXPECT_EQ(place.master_addr, "node07");
  EXPECT_EQ(place.master_port, slurm_port(4242, 0));
  // Two tasks on a node would start two launchers there.
  expect_error<ValueError>([&] { launcher_place_from_slurm(*slurm_step_from_variables(task_three()), task_three()); },
                           {"--ntasks-per-node=1", "SLURM_NTASKS=4"});
}
