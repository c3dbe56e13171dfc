// The env contract read back by a worker: a round trip, and errors that name the variable.
#include <gtest/gtest.h>

#include "tessera/dist/launcher/env.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::dist::launcher;
using tessera::testing::expect_error;

namespace {

WorkerEnv sample() {
  WorkerEnv env;
  env.rank = 5;
  env.world_size = 8;
  env.local_rank = 1;
  env.local_world_size = 4;
  env.node_rank = 1;
  env.master_addr = "198.18.0.7";
  env.master_port = 29500;
  env.job_token = "00112233445566778899aabbccddeeff";
  env.num_threads = 3;
  return env;
}

}  // namespace

TEST(WorkerEnv, RoundTripsThroughVariables) {
  EXPECT_EQ(worker_env_from_variables(to_variables(sample())), sample());
  auto v = to_variables(sample());
  EXPECT_EQ(v.at("RANK"), "5");
  EXPECT_EQ(v.at("MASTER_PORT"), "29500");
  EXPECT_EQ(v.at("TESSERA_NUM_THREADS"), "3");
}

TEST(WorkerEnv, NumThreadsIsOptional) {
  WorkerEnv env = sample();
  env.num_threads = 0;
  auto v = to_variables(env);
  EXPECT_EQ(v.count("TESSERA_NUM_THREADS"), 0u);
  EXPECT_EQ(worker_env_from_variables(v).num_threads, 0);
}

TEST(WorkerEnv, MissingVariableIsNamed) {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
                           "MASTER_PORT", "TESSERA_JOB_TOKEN"}) {
    auto v = to_variables(sample());
    v.erase(name);
    expect_error<ValueError>([&] { worker_env_from_variables(v); }, {name, "is not set", "tessera run"});
  }
}

TEST(WorkerEnv, MalformedVariableIsNamed) {
  struct Case {
    const char* name;
    const char* value;
    const char* fragment;
  };
  for (Case c : {Case{"RANK", "8", "out of range"}, Case{"RANK", "-1", "out of range"}, Case{"RANK", "2x", "not an integer"},
                 Case{"WORLD_SIZE", "", "not an integer"}, Case{"LOCAL_RANK", "4", "out of range"},
                 Case{"MASTER_PORT", "70000", "out of range"}, Case{"MASTER_PORT", "0", "out of range"},
                 Case{"TESSERA_JOB_TOKEN", "", "empty"}, Case{"MASTER_ADDR", "", "empty"},
                 Case{"TESSERA_NUM_THREADS", "0", "out of range"}}) {
    auto v = to_variables(sample());
    v[c.name] = c.value;
    expect_error<ValueError>([&] { worker_env_from_variables(v); }, {c.name, c.fragment});
  }
}

// The parameter-server side of the contract: what servers and a PS job's workers get, read back.
namespace {

ServerEnv sample_server() {
  ServerEnv env;
  env.server_rank = 3;
  env.num_servers = 4;
  env.num_workers = 6;
  env.node_rank = 1;
  env.master_addr = "198.18.0.7";
  env.master_port = 29500;
  env.job_token = "00112233445566778899aabbccddeeff";
  env.num_threads = 2;
  return env;
}

PsRoleEnv role(PsRoleEnv::Role r, int server_rank, int num_servers, int num_workers) {
  PsRoleEnv env;
  env.role = r;
  env.server_rank = server_rank;
  env.num_servers = num_servers;
  env.num_workers = num_workers;
  return env;
}

}  // namespace

TEST(PsRoleEnv, NoRoleOutsideAParameterServerJob) {
  EXPECT_EQ(ps_role_from_variables(to_variables(sample())), PsRoleEnv{});
  EXPECT_EQ(ps_role_from_variables({}).role, PsRoleEnv::Role::kNone);
}

TEST(PsRoleEnv, ServerRoundTripsAndHasNoRank) {
  auto v = to_variables(sample_server());
  EXPECT_EQ(ps_role_from_variables(v), role(PsRoleEnv::Role::kServer, 3, 4, 6));
  EXPECT_EQ(v.at("TESSERA_ROLE"), "server");
  EXPECT_EQ(v.at("NODE_RANK"), "1");
  EXPECT_EQ(v.at("MASTER_ADDR"), "198.18.0.7");
  EXPECT_EQ(v.at("MASTER_PORT"), "29500");
  EXPECT_EQ(v.at("TESSERA_JOB_TOKEN"), sample_server().job_token);
  EXPECT_EQ(v.at("TESSERA_NUM_THREADS"), "2");
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"})
    EXPECT_EQ(v.count(name), 0u) << name;
  // Not a rank of a job: the worker contract does not accept it.
  expect_error<ValueError>([&] { worker_env_from_variables(v); }, {"WORLD_SIZE", "is not set"});
}

TEST(PsRoleEnv, WorkerKeepsTheWorkerContract) {
  auto v = to_ps_worker_variables(sample(), 4);
  EXPECT_EQ(ps_role_from_variables(v), role(PsRoleEnv::Role::kWorker, -1, 4, 8));  // num_workers = WORLD_SIZE
  EXPECT_EQ(worker_env_from_variables(v), sample());
  EXPECT_EQ(v.at("TESSERA_ROLE"), "worker");
  EXPECT_EQ(v.count("TESSERA_SERVER_RANK"), 0u);
  EXPECT_EQ(v.count("TESSERA_NUM_WORKERS"), 0u);
}

TEST(PsRoleEnv, EveryVariableSetIsAContractVariable) {
  for (const auto& v : {to_variables(sample()), to_variables(sample_server()), to_ps_worker_variables(sample(), 2)})
    for (const auto& [name, value] : v) EXPECT_TRUE(is_contract_variable(name)) << name;
  EXPECT_FALSE(is_contract_variable("PATH"));
  EXPECT_FALSE(is_contract_variable("RANKS"));
}

TEST(PsRoleEnv, MissingVariableIsNamed) {
  for (const char* name : {"TESSERA_SERVER_RANK", "TESSERA_NUM_SERVERS", "TESSERA_NUM_WORKERS"}) {
    auto v = to_variables(sample_server());
    v.erase(name);
    expect_error<ValueError>([&] { ps_role_from_variables(v); }, {"[ps_role_env]", name, "is not set"});
  }
  for (const char* name : {"TESSERA_NUM_SERVERS", "WORLD_SIZE"}) {
    auto v = to_ps_worker_variables(sample(), 4);
    v.erase(name);
    expect_error<ValueError>([&] { ps_role_from_variables(v); }, {"[ps_role_env]", name, "is not set"});
  }
}

TEST(PsRoleEnv, MalformedVariableIsNamed) {
  struct Case {
    const char* name;
    const char* value;
    const char* fragment;
  };
  for (Case c : {Case{"TESSERA_ROLE", "bogus", "neither 'server' nor 'worker'"},
                 Case{"TESSERA_ROLE", "", "neither 'server' nor 'worker'"},
                 Case{"TESSERA_SERVER_RANK", "4", "out of range [0, 3]"},  // >= TESSERA_NUM_SERVERS
                 Case{"TESSERA_SERVER_RANK", "-1", "out of range"}, Case{"TESSERA_SERVER_RANK", "1x", "not an integer"},
                 Case{"TESSERA_NUM_SERVERS", "0", "out of range"}, Case{"TESSERA_NUM_WORKERS", "0", "out of range"},
                 Case{"TESSERA_NUM_WORKERS", "", "not an integer"}}) {
    auto v = to_variables(sample_server());
    v[c.name] = c.value;
    expect_error<ValueError>([&] { ps_role_from_variables(v); }, {c.name, c.fragment, "tessera run"});
  }
  auto worker = to_ps_worker_variables(sample(), 4);
  worker["TESSERA_NUM_SERVERS"] = "none";
  expect_error<ValueError>([&] { ps_role_from_variables(worker); }, {"TESSERA_NUM_SERVERS", "not an integer"});
}
