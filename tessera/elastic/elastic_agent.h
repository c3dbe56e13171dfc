// The elastic agent behind `tessera run --nnodes MIN:MAX --rdzv-backend store|etcd ...`: one per
// machine. Per generation it joins the rendezvous (rendezvous.h), starts its workers with the env
// contract (dist/launcher/env.h; ranks and world size from the membership), and watches them, the
// other agents and the membership:
//  - a worker that dies (crash, kill -9) ends the generation at once ("failure"); a worker killed
//    by a signal loses its slot (the device is taken to be bad), one that exited non-zero (an
//    exception, often a dead peer seen first) keeps it; every agent stops its workers and all
//    rejoin, so the job goes on with the new world size from its latest checkpoint (`tessera train
//    --resume auto` with train.global_batch_size keeps the global batch, schedule and data position);
//  - a worker whose heartbeat (TESSERA_HEARTBEAT_MS: the process group's watchdog thread, off the
//    data path) stops for heartbeat_timeout (SIGSTOP, a hang outside the collectives) is reported
//    by rank, with the collective the others wait in, then SIGKILLed: a failure as above;
//  - an agent whose heartbeat stops (its machine is gone) ends the generation ("lost");
//  - an agent that arrives while the job runs below MAX ends it ("grow") and the job grows.
// Failures are bounded by max_restarts over the job; the next one fails every agent with a
// message naming each failure. Node 0 of each generation hosts that generation's worker store,
// reports the time from a failure to the first completed step after it and the steps lost, and
// names a straggler: a rank whose arrival times at the collectives (carried by the heartbeats) keep
// the others waiting far longer than any other rank does, three windows in a row.
// After a failure the surviving workers are asked (SIGUSR1) to save the state they hold in memory
// (train/survivor_save.h), so the next generation resumes from the last step every replica finished.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::elastic {

using Milliseconds = std::chrono::milliseconds;

struct ElasticOptions {
  int min_nodes = 1, max_nodes = 1;        // --nnodes MIN:MAX (agents)
  int nproc_per_node = 1;                  // workers this agent starts (fewer after failures)
  std::string backend = "store";           // store | etcd
  std::string endpoint = "127.0.0.1:29400";  // store: the first agent to bind it hosts it; etcd: its client URL
  std::string run_id = "default";          // --rdzv-id: jobs sharing an endpoint stay apart
  int max_restarts = 3;                    // failures the job survives
  // Where this agent's workers' store listens (as node 0); "": loopback when the rendezvous is on
  // loopback, else the address of the interface that reaches it.
  std::string local_addr;
  std::vector<std::string> command;        // PROGRAM ARGS...
  std::string job_token;                   // empty: $TESSERA_JOB_TOKEN, else random (store backend, one agent)
  int threads_per_worker = 0;              // 0: $TESSERA_NUM_THREADS, else cores / nproc_per_node
  Milliseconds grace_period{3000};         // SIGTERM to SIGKILL when stopping a generation's workers
  Milliseconds last_call{1000};            // rendezvous.h
  Milliseconds join_timeout{60000};
  Milliseconds heartbeat_interval{200};    // agents' and workers' heartbeats
  Milliseconds heartbeat_timeout{10000};   // silence after which an agent or a worker counts as failed
  Milliseconds straggler_window{2000};
  int stdout_fd = 1, stderr_fd = 2;
};

// One recovery as node 0 of the next generation measured it.
struct Recovery {
  int64_t generation = 0;  // the new generation
  std::string cause;       // failure | lost | grow
  int world_size = 0;
  double seconds = 0;      // from the end of the old generation (a worker's death) to the first step done after
  int64_t last_step = -1;  // the step rank 0 had reached (-1: unknown)
  int64_t resumed_step = 0;
  int64_t steps_lost = -1;
};

struct ElasticResult {
  int exit_code = 0;
  std::string message;  // empty on success
  int restarts = 0;     // generations ended by a failure, and this agent's workers lost in a live job
  int64_t generations = 0;
  std::vector<std::string> failures;
  std::vector<Recovery> recoveries;
  std::vector<int> stragglers;  // ranks named as consistently late
  std::vector<std::string> stalls;  // stall reports this agent made
};

ElasticResult run_elastic(const ElasticOptions& options);

// "4" -> {4, 4}; "2:4" -> {2, 4}. ValueError otherwise.
std::pair<int, int> parse_nnodes(const std::string& text);
// "host:port" -> {host, port}. ValueError otherwise.
std::pair<std::string, int> parse_endpoint(const std::string& text);
// "host:port[,host:port...]" (the members of an etcd cluster) -> each. ValueError otherwise.
std::vector<std::pair<std::string, int>> parse_endpoints(const std::string& text);

}  // namespace tessera::elastic
