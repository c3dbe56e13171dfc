// tessera plan's dry run in one process (tessera/plan/job_plan.h): memory per rank as the layout's
// formula says, every rank's collectives agreeing, and a difference from a real run's records found.
#include "tessera/plan/job_plan.h"

#include <gtest/gtest.h>

#include <fstream>

#include "testing/temp_dir.h"
#include "tessera/train/config.h"

namespace tessera::plan {
namespace {

train::TrainConfig mlp_config(const std::string& dir, const std::string& strategy) {
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [64, 32]\n"
                                       << "[data]\ndataset = \"synthetic\"\nsamples = 512\ntest_samples = 64\nclasses = 4\n"
                                       << "[optimizer]\nname = \"adam\"\nlr = 0.01\n"
                                       << "[train]\nepochs = 1\nthreads = 1\nglobal_batch_size = 32\n"
                                       << "[distributed]\nstrategy = \"" << strategy << "\"\nzero_stage = 3\n";
  return train::load_config(dir + "/config.toml");
}

JobPlan plan_of(const train::TrainConfig& config, int world, int hosts = 1) {
  PlanOptions o;
  o.world = world;
  o.hosts = hosts;
  return make_plan(config, o, "config.toml");
}

TEST(JobPlan, ZeroStage3HoldsAQuarterOfWhatOneProcessHoldsAtFourRanks) {
  const std::string dir = tessera::testing::fresh_dir("plan", "zero3");
  const JobPlan one = plan_of(mlp_config(dir, "ddp"), 1);
  const JobPlan zero = plan_of(mlp_config(dir, "zero"), 4);
  ASSERT_EQ(zero.ranks.size(), 4u);
  const MemoryPlan& whole = one.ranks[0].memory;
  for (const RankPlan& r : zero.ranks) {
    // Each unit is cut into 4 equal pieces (padded by at most 3 elements per unit).
    EXPECT_NEAR(static_cast<double>(r.memory.parameters), whole.parameters / 4.0, 3 * 4 * 3) << r.rank;
    EXPECT_NEAR(static_cast<double>(r.memory.optimizer_state), whole.optimizer_state / 4.0, 2 * 3 * 4 * 3 + 8) << r.rank;
    EXPECT_GT(r.memory.activations, 0) << r.rank;
  }
  EXPECT_EQ(sequence_disagreement(zero), "");
  const std::string text = plan_text(zero);
  EXPECT_NE(text.find("reduce_scatter"), std::string::npos) << text;
  EXPECT_NE(text.find("every rank of every process group issues the same collectives"), std::string::npos) << text;
}

TEST(JobPlan, HostsSplitTheBytesBetweenTheLinks) {
  const std::string dir = tessera::testing::fresh_dir("plan", "hosts");
  const JobPlan ddp = plan_of(mlp_config(dir, "ddp"), 4, 2);
  const int64_t gradient_bytes = ddp.ranks[0].memory.gradients;
  const std::string step = ddp.reported_step();
  // DDP's buckets: hierarchical, rank 0 and 2 lead their hosts; 2(H-1)/H of the gradients each.
  EXPECT_NEAR(static_cast<double>(phase_bytes(ddp, ddp.ranks[0], step).between_hosts), gradient_bytes, 64);
  EXPECT_EQ(phase_bytes(ddp, ddp.ranks[1], step).between_hosts, 0);  // the stop flag too goes through the leader
  const nlohmann::json j = plan_json(ddp);
  EXPECT_EQ(j["world"], 4);
  EXPECT_EQ(j["ranks"][2]["host"], 1);
  EXPECT_TRUE(j["sequences_agree"].get<bool>());
}

TEST(JobPlan, ADifferentCallUnderOneNumberIsNamedWithBothRanks) {
  const std::string dir = tessera::testing::fresh_dir("plan", "disagree");
  JobPlan plan = plan_of(mlp_config(dir, "ddp"), 2);
  int64_t compared = 0;
  std::vector<nlohmann::json> records;
  for (const RankPlan& r : plan.ranks)
    for (const auto& record : r.flight_records) records.push_back(record);
  EXPECT_EQ(compare_with_flight_records(plan, records, compared), "");
  EXPECT_GT(compared, 10);
  // Rank 1 "calls" something else as its first collective.
  auto& entry = plan.ranks[1].flight_records[0]["entries"][0];
  entry["description"] = "allreduce #0 (sum, float32 x 3)";
  const std::string why = sequence_disagreement(plan);
  EXPECT_NE(why.find("collective #0"), std::string::npos) << why;
  EXPECT_NE(why.find("float32 x 3"), std::string::npos) << why;
  EXPECT_NE(compare_with_flight_records(plan, records, compared).find("the run called"), std::string::npos);
  // A rank that issues one collective more than its group's others: the real job would hang there.
  entry["description"] = plan.ranks[0].flight_records[0]["entries"][0]["description"];
  ASSERT_EQ(sequence_disagreement(plan), "");
  plan.ranks[1].flight_records[0]["next_sequence"] = plan.ranks[1].flight_records[0]["next_sequence"].get<uint64_t>() + 1;
  EXPECT_NE(sequence_disagreement(plan).find("different numbers of collectives"), std::string::npos);
  records.clear();
  EXPECT_THROW(compare_with_flight_records(plan, records, compared), ValueError);
}

// A pipeline's stages wait for each other's headers: the ranks first run at once (threads) to pass
// them, then one at a time. Interleaved stages send back from the last stage to the first, so the
// one-at-a-time runs alone could never have them.
TEST(JobPlan, PipelineStagesGetEachOthersHeadersAndEveryStageIsMeasured) {
  const std::string dir = tessera::testing::fresh_dir("plan", "pipeline");
  {
    std::ofstream out(dir + "/corpus.txt");
    for (int i = 0; i < 60; ++i) out << "all the world's a stage, and all the men and women merely players\n";
  }
  std::ofstream(dir + "/gpt.toml") << "[model]\nname = \"transformer\"\nlayers = 4\nheads = 2\nembed_dim = 16\ncontext = 8\n"
                                   << "[data]\ndataset = \"text\"\npath = \"" << dir << "/corpus.txt\"\n"
                                   << "[train]\nepochs = 1\nthreads = 1\nbatch_size = 4\n"
                                   << "[parallel]\npp = 2\nschedule = \"interleaved\"\nvirtual_stages = 2\nmicrobatches = 4\n";
  const JobPlan plan = plan_of(train::load_config(dir + "/gpt.toml"), 2);
  EXPECT_EQ(sequence_disagreement(plan), "");
  for (const RankPlan& r : plan.ranks) {
    EXPECT_GT(r.memory.activations, 0) << r.rank;
    int64_t sends = 0;
    for (const dist::DryCall& c : r.calls) sends += c.phase == plan.reported_step() && c.op == "send";
    // 4 micro-batches through 2 chunks each way: at least a header and a payload per activation.
    EXPECT_GE(sends, 2 * 4) << r.rank;
  }
}

// An odd vocabulary cut over TP = 2 gives the ranks shards of different sizes, which the loss
// gathers: each rank must see both, as in the real job, or its targets fall outside its vocabulary.
TEST(JobPlan, TensorParallelRanksSeeEachOthersShardsOfAnOddVocabulary) {
  const std::string dir = tessera::testing::fresh_dir("plan", "odd_vocabulary");
  {
    std::ofstream out(dir + "/corpus.txt");
    for (int i = 0; i < 80; ++i) out << "abcd\n";  // 5 symbols
  }
  std::ofstream(dir + "/gpt.toml") << "[model]\nname = \"transformer\"\nlayers = 2\nheads = 2\nembed_dim = 16\ncontext = 8\n"
                                   << "[data]\ndataset = \"text\"\npath = \"" << dir << "/corpus.txt\"\n"
                                   << "[train]\nepochs = 1\nthreads = 1\nbatch_size = 4\n"
                                   << "[parallel]\ntp = 2\n";
  const JobPlan plan = plan_of(train::load_config(dir + "/gpt.toml"), 2);
  EXPECT_EQ(sequence_disagreement(plan), "");
  ASSERT_EQ(plan.ranks.size(), 2u);
  EXPECT_NE(plan.ranks[0].memory.parameters, plan.ranks[1].memory.parameters);  // 3 and 2 columns of lm_head
}

TEST(JobPlan, LayoutsThatCannotBePlannedAreRefusedByName) {
  const std::string dir = tessera::testing::fresh_dir("plan", "refused");
  train::TrainConfig ps = mlp_config(dir, "ddp");
  ps.distributed.strategy = "ps";
  EXPECT_THROW(plan_of(ps, 2), ValueError);
  EXPECT_THROW(plan_of(mlp_config(dir, "ddp"), 3, 2), ValueError);  // 3 ranks on 2 hosts
}

}  // namespace
}  // namespace tessera::plan
