// Live membership end to end (dist/live_membership.h, train/trainer_live.cpp): real launchers and
// `tessera train` workers on loopback. A worker kills itself (the trainer's fault injection) at a
// given step; its peers go on in the same processes, and a replacement, where the launcher may start
// one, joins at a step boundary with their state. Each test then checks the run against the same job
// resized on purpose at the same steps, through checkpoints: bit for bit, so the recovery changed
// nothing but the world size.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "elastic/elastic_jobs.h"
#include "testing/state_compare.h"

namespace tessera {
namespace {

using namespace tessera::elastic_jobs;

// The lines the launcher and the trainer log about membership.
void print_live_lines(const std::string& log) {
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find("[live]") != std::string::npos || line.find("live membership:") != std::string::npos)
      std::printf("  %s\n", line.c_str());
}

// The metrics records of <dir>/run of one type.
std::vector<nlohmann::json> records(const std::string& dir, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::istringstream in(tessera::testing::read_text(dir + "/run/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_discarded() && record.value("type", "") == type) out.push_back(record);
  }
  return out;
}

// `tessera run --nproc-per-node N` of the config in <dir> into <dir>/<run>, resuming, up to `steps`
// (0: the end).
Outcome plain_run(const std::string& dir, const std::string& run, int nproc, int64_t steps, const std::string& extra = "") {
  return run_shell(std::string(TESSERA_BINARY) + " run --nproc-per-node " + std::to_string(nproc) + " --grace-period 2 " +
                       extra + " -- " + TESSERA_BINARY + " train " + dir + "/config.toml --resume auto --set " +
                       "train.output_dir=" + dir + "/" + run +
                       (steps > 0 ? " --set train.max_steps=" + std::to_string(steps) : std::string()),
                   dir + "/" + run + "-" + std::to_string(nproc) + "-" + std::to_string(steps) + ".log");
}

// The same job without faults, resized on purpose: world sizes[i] up to steps[i] (the last to the end).
void run_planned(const std::string& dir, const std::vector<int>& sizes, const std::vector<int64_t>& steps) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    Outcome o = plain_run(dir, "planned", sizes[i], i < steps.size() ? steps[i] : 0);
    ASSERT_EQ(o.status, 0) << o.log;
  }
}

// Every step's loss and the final parameters, bit for bit. `unrecorded`: a step whose metrics record
// went with a lost rank 0 (its loss was that rank's own).
void expect_equal_to_planned(const std::string& dir, const std::set<int64_t>& unrecorded = {}) {
  auto live = step_losses(dir, "run"), planned = step_losses(dir, "planned");
  ASSERT_EQ(live.size() + unrecorded.size(), planned.size());
  for (const auto& [step, loss] : planned) {
    if (unrecorded.count(step)) continue;
    ASSERT_TRUE(live.count(step)) << "no record of step " << step;
    EXPECT_EQ(live[step], loss) << "step " << step;
  }
  EXPECT_EQ(tessera::testing::count_bitwise_differences(final_model(dir, "run"), final_model(dir, "planned")), 0);
}

// One agent on loopback with `nproc` workers of a live job (the default there) and one replacement
// allowed; `fault` is the trainer's fault injection.
Outcome live_agent_run(const std::string& dir, int nproc, const std::string& fault, const std::string& distributed = "") {
  write_config(dir, 480, "auto", distributed);
  // Rank 0 paced at 40 ms a step: the replacement (a new process loading its data) joins well before
  // the job's 80th step however loaded the machine (the planned runs are not paced; it changes no value).
  Outcome o = run_shell(agent(dir, "1:1", nproc, "store", endpoint(), "--max-restarts 1",
                              fault + " --set distributed.debug_slow_rank=0 --set distributed.debug_slow_ms=40"),
                        dir + "/agent.log");
  print_live_lines(o.log);
  return o;
}

// `tessera run --nproc-per-node 3` of the config in <dir> (live membership "on" there, no
// replacement), with `fault`.
Outcome live_plain_run(const std::string& dir, const std::string& fault) {
  Outcome o = run_shell(std::string(TESSERA_BINARY) + " run --nproc-per-node 3 --grace-period 2 -- " + TESSERA_BINARY +
                            " train " + dir + "/config.toml " + fault,
                        dir + "/run.log");
  print_live_lines(o.log);
  return o;
}

// Under the elastic agent (live membership's default there): rank 2 of 4 is lost at step 23; the
// three others go on in the same processes, and the agent's replacement joins them. `distributed`:
// more [distributed] lines (the strategy).
void lose_rank_two_of_four_under_the_agent(const std::string& name, const std::string& distributed) {
  const std::string dir = tessera::testing::fresh_dir("live_run", name);
  Outcome o = live_agent_run(dir, 4, "--set distributed.debug_kill_rank=2 --set distributed.debug_kill_step=23",
                             distributed);
  ASSERT_EQ(o.status, 0) << o.log;
  EXPECT_EQ(o.log.find("generation 1:"), std::string::npos) << "no new generation, no restart:\n" << o.log;
  EXPECT_NE(o.log.find("rank 2 (pid"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("started a replacement (pid"), std::string::npos) << o.log;
  // One start: rank 0's trainer ran from the first step to the last in one process.
  EXPECT_EQ(records(dir, "start").size(), 1u);
  const auto changes = records(dir, "membership");
  ASSERT_EQ(changes.size(), 2u) << o.log;
  EXPECT_EQ(changes[0]["world_size"], 3);
  EXPECT_EQ(changes[0]["step"], 23) << "the state every survivor held: no step lost";
  EXPECT_EQ(changes[0]["steps_redone"], 0) << "rank 2 finished step 23 (ZeRO: its pieces reached rank 3)";
  EXPECT_EQ(changes[1]["world_size"], 4);
  const int64_t rejoined = changes[1]["step"];
  std::printf("  the replacement joined after step %lld; recoveries took %.3f s and %.3f s\n",
              static_cast<long long>(rejoined), changes[0]["seconds"].get<double>(), changes[1]["seconds"].get<double>());
  EXPECT_EQ(final_step(dir), 80);
  EXPECT_EQ(step_losses(dir, "run").size(), 80u) << "every step once";
  run_planned(dir, {4, 3, 4}, {23, rejoined});
  expect_equal_to_planned(dir);
}

TEST(LiveRun, AKilledWorkersPeersGoOnInTheirProcessesAndAReplacementJoinsWithTheirState) {
  lose_rank_two_of_four_under_the_agent("agent", "");
}

// With `tessera run` and live membership "on", rank 0 of 3 is lost at step 12 and no replacement may
// start: the two others finish the job, the new rank 0 writing the metrics and checkpoints.
// `distributed`: more [distributed] lines (the strategy).
void lose_rank_zero_of_three(const std::string& name, const std::string& distributed) {
  const std::string dir = tessera::testing::fresh_dir("live_run", name);
  write_config(dir, 480, "on", distributed);
  Outcome o = live_plain_run(dir, "--set distributed.debug_kill_rank=0 --set distributed.debug_kill_step=12");
  ASSERT_EQ(o.status, 0) << o.log;
  EXPECT_NE(o.log.find("rank 0 (pid"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("live membership: its peers go on without it"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("final test accuracy"), std::string::npos) << o.log;
  const auto changes = records(dir, "membership");
  ASSERT_EQ(changes.size(), 1u) << o.log;
  EXPECT_EQ(changes[0]["world_size"], 2);
  EXPECT_EQ(changes[0]["step"], 12);
  EXPECT_EQ(final_step(dir), 80);
  run_planned(dir, {3, 2}, {12});
  expect_equal_to_planned(dir, {12});  // rank 0's step 12 went with it
}

TEST(LiveRun, WithoutAReplacementThePeersOfALostRankZeroFinishTheJob) { lose_rank_zero_of_three("plain", ""); }

// A loss at an epoch's last step (40 of 40): the members' state is at the end of the epoch, which
// they evaluate and save before the next one, as an undisturbed run does.
TEST(LiveRun, ALossAtAnEpochsLastStepStillEvaluatesThatEpoch) {
  const std::string dir = tessera::testing::fresh_dir("live_run", "epoch_end");
  write_config(dir, 480, "on");
  Outcome o = live_plain_run(dir, "--set distributed.debug_kill_rank=1 --set distributed.debug_kill_step=40");
  ASSERT_EQ(o.status, 0) << o.log;
  EXPECT_EQ(records(dir, "membership").size(), 1u) << o.log;
  EXPECT_EQ(records(dir, "epoch").size(), 2u) << "both epochs evaluated:\n" << o.log;
  EXPECT_EQ(final_step(dir), 80);
  run_planned(dir, {3, 2}, {40});
  expect_equal_to_planned(dir);
}

// A stopped worker (SIGSTOP) is found by the agent's heartbeat watch and killed; that loss is a live
// one too: the others go on and a replacement joins, in the same generation.
TEST(LiveRun, AStoppedWorkerIsKilledAndReplacedWithinTheGeneration) {
  const std::string dir = tessera::testing::fresh_dir("live_run", "stop");
  Outcome o = live_agent_run(dir, 3, "--set distributed.debug_stop_rank=1 --set distributed.debug_stop_step=12");
  ASSERT_EQ(o.status, 0) << o.log;
  EXPECT_TRUE(std::regex_search(o.log, std::regex("stall: rank 1 \\(pid \\d+\\) sent no heartbeat for [0-9.]+ s "
                                                  "\\(process state T \\(stopped\\)\\)")))
      << o.log;
  EXPECT_EQ(o.log.find("generation 1:"), std::string::npos) << o.log;
  const auto changes = records(dir, "membership");
  ASSERT_EQ(changes.size(), 2u) << o.log;
  EXPECT_EQ(changes[0]["world_size"], 2);
  EXPECT_EQ(changes[1]["world_size"], 3);
  EXPECT_EQ(final_step(dir), 80);
  EXPECT_EQ(step_losses(dir, "run").size(), 80u);
}

// ZeRO-2, the same: rank 2's pieces of the optimizer state are with rank 3, which kept them
// (parallel/zero/shard_buddies.h); the others rebuild the whole state from the pieces and cut it
// again over three, then over four with the replacement.
TEST(LiveRun, ZeroTwoGoesOnWithTheLostRanksPiecesFromItsNeighbour) {
  lose_rank_two_of_four_under_the_agent("zero2", "strategy = \"zero\"\nzero_stage = 2\n");
}

// ZeRO-1, the same: rank 0's pieces of the optimizer state come from rank 1, which kept them.
TEST(LiveRun, ZeroOneLosesRankZeroAndItsPiecesComeFromRankOne) {
  lose_rank_zero_of_three("zero1", "strategy = \"zero\"\nzero_stage = 1\n");
}

// ZeRO-2, rank 1 of 3 lost inside step 12: after its update, before its pieces of step 12 reached
// rank 2, so rank 2 holds rank 1's pieces of step 11 only, while rank 0 finished step 12. The members
// rebuild step 11 and redo step 12 (the lead's record of it goes): still bit for bit the job resized
// at step 11.
TEST(LiveRun, ZeroRedoesTheStepWhoseLostPiecesNeverReachedTheNeighbour) {
  const std::string dir = tessera::testing::fresh_dir("live_run", "zero_redo");
  write_config(dir, 480, "on", "strategy = \"zero\"\nzero_stage = 2\n");
  Outcome o = live_plain_run(dir, "--set distributed.debug_kill_rank=1 --set distributed.debug_kill_step=12 "
                                  "--set distributed.debug_kill_point=commit");
  ASSERT_EQ(o.status, 0) << o.log;
  EXPECT_NE(o.log.find("before its pieces went to its neighbour"), std::string::npos) << o.log;
  const auto changes = records(dir, "membership");
  ASSERT_EQ(changes.size(), 1u) << o.log;
  EXPECT_EQ(changes[0]["world_size"], 2);
  EXPECT_EQ(changes[0]["step"], 11);
  EXPECT_EQ(changes[0]["steps_redone"], 1) << "rank 0 had finished step 12";
  EXPECT_EQ(final_step(dir), 80);
  EXPECT_EQ(step_losses(dir, "run").size(), 80u) << "step 12 recorded once, as redone";
  run_planned(dir, {3, 2}, {11});
  expect_equal_to_planned(dir);
}

// ZeRO-2, rank 1 of 3 lost while rank 2, which keeps rank 1's pieces, is busy (paced at 600 ms a
// step, six times the settle time set here): rank 0 meets alone, and rank 1's pieces are with
// nobody there. Rank 2 arrives late, asks to join with the pieces still in memory, is admitted, and
// the two meet again and go on: nothing lost, bit for bit the job resized at step 4.
TEST(LiveRun, ZeroWaitsForALateMemberHoldingPiecesNobodyElseHas) {
  const std::string dir = tessera::testing::fresh_dir("live_run", "zero_late");
  write_config(dir, 120, "on", "strategy = \"zero\"\nzero_stage = 2\nlive_settle_ms = 100\n");
  Outcome o = live_plain_run(dir, "--set distributed.debug_kill_rank=1 --set distributed.debug_kill_step=4 "
                                  "--set distributed.debug_slow_rank=2 --set distributed.debug_slow_ms=600");
  ASSERT_EQ(o.status, 0) << o.log;
  EXPECT_NE(o.log.find("the round closed before this rank arrived"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("meeting again with the processes that asked to join since"), std::string::npos) << o.log;
  const auto changes = records(dir, "membership");
  ASSERT_EQ(changes.size(), 1u) << o.log;
  EXPECT_EQ(changes[0]["world_size"], 2);
  EXPECT_EQ(changes[0]["step"], 4);
  EXPECT_EQ(changes[0]["steps_redone"], 0);
  EXPECT_EQ(final_step(dir), 20);
  run_planned(dir, {3, 2}, {4});
  expect_equal_to_planned(dir);
}

// ZeRO-2, rank 1 of 3 lost while rank 2, which keeps its pieces, is stopped (SIGSTOP) at the same
// step: those pieces are with no process that can answer. Rank 0 waits for a late member (half the
// collective timeout), then exits with the status that makes its launcher fail the job (an elastic
// agent would restart it from its last checkpoint) instead of going on without it.
TEST(LiveRun, ZeroLosingARankAndItsBuddyFailsTheJobSayingWhy) {
  const std::string dir = tessera::testing::fresh_dir("live_run", "zero_lost");
  write_config(dir, 480, "on", "strategy = \"zero\"\nzero_stage = 2\n");
  Outcome o = live_plain_run(dir, "--set distributed.debug_kill_rank=1 --set distributed.debug_kill_step=5 "
                                  "--set distributed.debug_stop_rank=2 --set distributed.debug_stop_step=5 "
                                  "--set distributed.timeout_s=6");
  EXPECT_NE(o.status, 0) << o.log;
  EXPECT_NE(o.log.find("the ZeRO pieces of rank(s) 1 (kept by 2) of the last layout were lost"), std::string::npos)
      << o.log;
  EXPECT_NE(o.log.find("rank 0 (pid"), std::string::npos) << o.log;
  EXPECT_NE(o.log.find("exited with status 76"), std::string::npos) << o.log;
}

// "on" where live membership cannot carry the job is refused before step 1, saying what to do.
TEST(LiveRun, OnForAStrategyItCannotCarryIsRefusedSayingWhy) {
  const std::string dir = tessera::testing::fresh_dir("live_run", "refused");
  write_config(dir, 480, "on");
  Outcome o = run_shell(std::string(TESSERA_BINARY) + " run --nproc-per-node 2 --grace-period 2 -- " + TESSERA_BINARY +
                            " train " + dir + "/config.toml --set distributed.strategy=zero --set distributed.zero_stage=3",
                        dir + "/run.log");
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.log.find("distributed.live_membership = \"on\" cannot carry the zero strategy at stage 3"),
            std::string::npos)
      << o.log;
}

}  // namespace
}  // namespace tessera
