// `tessera plan --predict`: a step's time from the dry run (job_plan.h) and a few measured rates.
// For each rank (the job's step is its slowest rank's: they meet in every collective):
//
//   step = max(its host's work / the host's cores,  its compute / (1 - bubble))  +  communication
//
// - compute: the rank's step as the dry run timed it on this machine (its collectives cost nothing
//   there), at the real shapes: the median of its steps after the first (--steps 6 for steadier).
// - the host's work: its ranks' compute times their threads, in core-seconds. Ranks that share a
//   host share its cores (the dominant term on 2-core machines), and a pipeline stage idling in its
//   bubble leaves its cores to the others, so the two bounds overlap instead of adding. Where the
//   host's every core is busy, each computes slower than the lone dry-run rank did (its caches and
//   memory bandwidth shared): the measured core-sharing slow-down multiplies the compute.
// - bubble: a pipeline of P stages with M micro-batches (and v chunks) idles its theoretical share.
// - communication: every collective of the step, each as slow as its slowest member: per hop a
//   link's latency, plus the bytes that member sends within its host at shared memory's rate and
//   between hosts at the network's (link_bytes.h says how many of each, and the algorithm how many
//   hops: 2(n-1) for a ring all-reduce, 2(p-1) + 2(H-1) hierarchical, n-1 for gathers, scatters,
//   all-to-all and a broadcast's chain). Point-to-point messages cost their sender one hop and their
//   bytes. Nothing is assumed hidden behind compute: on these machines the collectives' copies run on
//   the same cores (docs/distributed.md, "Planning a job", has the error that leaves).
// Shared memory's rates are measured here, in this process (calibrate_shared_memory); the network's
// come from --link and --latency-us (tessera doctor measures them between real hosts).
#pragma once
#include <string>
#include <vector>

#include "tessera/plan/job_plan.h"

namespace tessera::plan {

struct LinkRate {
  double latency_s = 0;     // per hop
  double bytes_per_s = 0;
};

struct CostInputs {
  LinkRate shared_memory;  // within a host
  LinkRate network;        // between hosts
  int cores_per_host = 1;
  // How much slower a core computes when every core of its host is busy than when it computes
  // alone, as the dry run's ranks did (shared caches and memory bandwidth; calibrate_core_sharing).
  double core_sharing_slowdown = 1;
};

// The slow-down above, measured here: a step's kinds of work (a matmul and a sum of 4 MiB tensors)
// at one thread, alone and then on every core at once (the best of three rounds of each).
double calibrate_core_sharing();

// Everything --predict needs: shared memory and core sharing measured here, the network as given
// (`link_gbit` 0: none), `cores` per host (0: this machine's). What the CLI, Python and the bench use.
CostInputs measured_cost_inputs(double link_gbit, double latency_us, int cores);

// Shared memory's latency and rate on this machine: all-reduces of 4 KiB and 4 MiB between two
// threads over the shm backend (the best of three rounds), the smaller's time per hop as the
// latency, the larger's bytes per second of what each rank sends.
LinkRate calibrate_shared_memory();

struct StepPrediction {
  double step_s = 0;           // the job's step (every rank waits for the slowest)
  int slowest_rank = 0;
  // The slowest rank's parts: its compute, its wait for the host's cores (the other ranks' work)
  // or else its pipeline's idling, and its communication.
  double compute_s = 0, sharing_s = 0, bubble_s = 0, communication_s = 0;
  std::vector<double> rank_step_s;
};

// The job's step time; `config` the one planned (threads, pipeline schedule).
StepPrediction predict_step(const JobPlan& plan, const train::TrainConfig& config, const CostInputs& inputs);

// What --predict prints, and what it adds to the plan's JSON ("prediction").
std::string prediction_text(const StepPrediction& prediction, const CostInputs& inputs);
nlohmann::json prediction_json(const StepPrediction& prediction);

}  // namespace tessera::plan
