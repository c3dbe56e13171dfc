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
  env.master_addr = "10.0.0.7";
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
