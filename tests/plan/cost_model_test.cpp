// tessera plan --predict's cost model (tessera/plan/cost_model.h) on plans whose figures are known,
// and --search's layouts (layout_search.h).
#include "tessera/plan/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/plan/layout_search.h"
#include "testing/temp_dir.h"

namespace tessera::plan {
namespace {

// `world` ranks on `hosts`, each stepping `step_ms` of compute and all-reducing `elements` floats.
JobPlan plan_with(int world, int hosts, double step_ms, int64_t elements) {
  JobPlan plan;
  plan.options.world = world;
  plan.options.hosts = hosts;
  plan.options.steps = 1;
  std::vector<int> everyone;
  for (int r = 0; r < world; ++r) everyone.push_back(r);
  for (int r = 0; r < world; ++r) {
    RankPlan rank;
    rank.rank = r;
    rank.step_seconds = {step_ms * 1e-3};
    rank.calls.push_back(dist::DryCall{"step 1", "allreduce", DType::Float32, elements, everyone, -1});
    plan.ranks.push_back(rank);
  }
  return plan;
}

CostInputs rates(int cores) {
  CostInputs in;
  in.shared_memory = {1e-6, 1e9};  // 1 us a hop, 1 GB/s
  in.network = {100e-6, 1e8};      // 100 us a hop, 100 MB/s
  in.cores_per_host = cores;
  return in;
}

train::TrainConfig one_thread() {
  train::TrainConfig c;
  c.train.threads = 1;
  return c;
}

TEST(CostModel, ARingInsideAHostCostsItsHopsAndItsBytes) {
  const StepPrediction p = predict_step(plan_with(2, 1, 10, 250000), one_thread(), rates(2));
  // 2 hops of 1 us; each rank sends 2(n-1)/n of 1 MB = 1 MB at 1 GB/s: 1 ms.
  EXPECT_NEAR(p.communication_s, 2e-6 + 1e-3, 1e-9);
  EXPECT_DOUBLE_EQ(p.sharing_s, 0.0);  // 2 ranks of 1 thread on 2 cores
  EXPECT_NEAR(p.step_s, 10e-3 + 2e-6 + 1e-3, 1e-9);
}

TEST(CostModel, RanksSharingCoresComputeSlowerAndHostsPayTheNetwork) {
  const StepPrediction shared = predict_step(plan_with(4, 1, 10, 0), one_thread(), rates(2));
  // 4 ranks of 1 thread on 2 cores: the host's 40 core-ms take 20 ms; each rank waits 10 for cores.
  EXPECT_NEAR(shared.compute_s, 10e-3, 1e-12);
  EXPECT_NEAR(shared.sharing_s, 10e-3, 1e-12);
  EXPECT_NEAR(shared.step_s, 20e-3 + 6e-6, 1e-12);  // and an empty all-reduce's 2(n-1) hops
  // 2 hosts of 2: within each host 2(p-1) = 2 hops and 2(p-1)/p of the buffer; the leaders 2(H-1) = 2
  // network hops and 2(H-1)/H of it over the network (rank 0: 1 MB at 1 GB/s + 1 MB at 100 MB/s).
  const StepPrediction two = predict_step(plan_with(4, 2, 10, 250000), one_thread(), rates(4));
  EXPECT_NEAR(two.communication_s, 2e-6 + 2 * 100e-6 + 1e-3 + 10e-3, 1e-9);
  CostInputs no_link = rates(4);
  no_link.network = {};
  EXPECT_THROW(predict_step(plan_with(4, 2, 10, 1), one_thread(), no_link), ValueError);
}

TEST(CostModel, APipelineIdlesItsScheduledBubble) {
  train::TrainConfig c = one_thread();
  c.parallel.pp = 2;
  c.parallel.microbatches = 4;
  c.parallel.schedule = "1f1b";
  const StepPrediction p = predict_step(plan_with(2, 1, 10, 0), c, rates(2));
  // (P-1)/(M+P-1) = 1/5 of the step idle: 10 ms of compute become 12.5.
  EXPECT_NEAR(p.bubble_s, 2.5e-3, 1e-9);
  // On one core the two stages' 20 core-ms take longer than the critical path: no bubble shows.
  const StepPrediction one_core = predict_step(plan_with(2, 1, 10, 0), c, rates(1));
  EXPECT_NEAR(one_core.step_s, 20e-3 + 2e-6, 1e-9);
  EXPECT_DOUBLE_EQ(one_core.bubble_s, 0.0);
}

TEST(CostModel, SharedMemoryIsMeasuredHere) {
  const LinkRate r = calibrate_shared_memory();
  EXPECT_GT(r.latency_s, 0);
  EXPECT_LT(r.latency_s, 0.01);
  EXPECT_GT(r.bytes_per_s, 1e7);
  EXPECT_TRUE(std::isfinite(r.bytes_per_s));
}

TEST(LayoutSearch, EveryWayToCutTheWorldIsACandidate) {
  PlanOptions o;
  o.world = 4;
  o.hosts = 2;
  std::vector<std::string> names;
  for (const Candidate& c : candidate_layouts(o)) names.push_back(c.name);
  // ddp, zero1-3, hsdp, and the meshes of 4 = dp·pp·tp other than dp4 x pp1 x tp1.
  EXPECT_EQ(names, (std::vector<std::string>{"ddp", "zero1", "zero2", "zero3", "hsdp", "mesh dp2 x pp1 x tp2",
                                             "mesh dp1 x pp1 x tp4", "mesh dp2 x pp2 x tp1", "mesh dp1 x pp2 x tp2",
                                             "mesh dp1 x pp4 x tp1"}));
}

TEST(LayoutSearch, LayoutsAreRankedAndTheOnesThatDoNotFitOrCannotBeMadeSaySo) {
  const std::string dir = tessera::testing::fresh_dir("plan", "search");
  std::ofstream(dir + "/mlp.toml") << "[model]\nname = \"mlp\"\nhidden = [64, 32]\n"
                                    << "[data]\ndataset = \"synthetic\"\nsamples = 512\ntest_samples = 64\nclasses = 4\n"
                                    << "[train]\nepochs = 1\nthreads = 1\nbatch_size = 16\n";
  PlanOptions o;
  o.world = 2;
  const auto results = search_layouts(train::load_config(dir + "/mlp.toml"), o, rates(2), 0);
  ASSERT_FALSE(results.empty());
  double previous = 0;
  bool planned_first = true;
  for (const SearchResult& r : results) {
    if (!r.refused.empty()) {
      planned_first = false;
      continue;
    }
    EXPECT_TRUE(planned_first) << r.candidate.name << " planned after a refused one";
    EXPECT_GE(r.prediction.step_s, previous) << r.candidate.name;
    previous = r.prediction.step_s;
    EXPECT_GT(r.peak, 0);
  }
  // A limit below every peak: nothing fits, and the table says so.
  const auto tight = search_layouts(train::load_config(dir + "/mlp.toml"), o, rates(2), 1);
  EXPECT_FALSE(tight.front().fits && tight.front().refused.empty());
  EXPECT_NE(search_text(tight, 1, "mlp.toml", o).find("does not fit"), std::string::npos);
}

}  // namespace
}  // namespace tessera::plan
