// `tessera plan CONFIG --world N`: every rank's dry run (dry_run.h) put together, what it says
// (memory per rank by category, each step's collectives, bytes on each kind of link), the proof
// that the ranks of every group issue the same collectives in the same order, and the comparison
// with a real run's flight records.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/plan/dry_run.h"
#include "tessera/plan/link_bytes.h"

namespace tessera::plan {

struct JobPlan {
  std::string config_source;  // the config file, for the report
  PlanOptions options;
  double link_gbit = 0;  // --link: the rate of a host's network link (Gbit/s); 0: not given
  std::vector<RankPlan> ranks;

  HostLayout layout() const { return HostLayout{options.world, options.hosts}; }
  std::string reported_step() const;  // the last phase: the steady step the report shows
};

// Runs rank 0 .. world-1 one after another; `on_rank(r)` before each (progress; -1 before the
// ranks' message exchange, where there is one).
JobPlan make_plan(const train::TrainConfig& config, const PlanOptions& options, const std::string& config_source,
                  const std::function<void(int)>& on_rank = {});

// "" when, in every process group, every member issued the same calls under the same numbers in the
// dry run; else the first number two members filled differently, with both calls and call sites.
std::string sequence_disagreement(const JobPlan& plan);

// A real run's flight records (dist::read_flight_records) against the plan: every entry whose rank,
// group and number the plan also has must be the same call. Returns the differences ("" none) and
// sets `compared` to the entries compared; ValueError when no record is of a rank and group of the plan.
std::string compare_with_flight_records(const JobPlan& plan, const std::vector<nlohmann::json>& records,
                                        int64_t& compared);

// What one rank sends in `phase`, by link.
LinkBytes phase_bytes(const JobPlan& plan, const RankPlan& rank, const std::string& phase);

std::string plan_text(const JobPlan& plan);
nlohmann::json plan_json(const JobPlan& plan);

}  // namespace tessera::plan
