// tessera plan CONFIG --world N [--hosts H] [--link RATE] [--steps S] [--json PATH] [--compare-flight DIR]:
// the job's dry run at N ranks on this one machine (tessera/plan/job_plan.h): memory per rank by
// category, each step's collectives, the bytes on each kind of link, and the proof that every rank
// issues the same collectives. --compare-flight checks the plan against a real run's flight records.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "tessera/core/error.h"
#include "tessera/dist/flight_report.h"
#include "tessera/io/atomic_file.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/job_plan.h"
#include "tessera/plan/layout_search.h"
#include "tessera/train/config.h"

namespace tessera::cli {

Command add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "Dry-run a job at N ranks on this machine: memory per rank, collectives per step, bytes per link");
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    plan::PlanOptions plan;
    double link_gbit = 0;
    std::string json_path, compare_dir;
    bool predict = false, search = false;
    double memory_mib = 0;
    double latency_us = 50;
    int cores = 0;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("config", o->config, "The training config (TOML), as tessera train takes it")->required();
  cmd->add_option("--set", o->overrides, "Override a key, e.g. --set distributed.strategy=zero (repeatable)");
  cmd->add_option("--world", o->plan.world, "Ranks of the planned job")->required()->check(CLI::Range(1, 4096));
  cmd->add_option("--hosts", o->plan.hosts, "Hosts they are spread over, world/hosts each (default 1)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--link", o->link_gbit, "A host's network link in Gbit/s (the report's lower bound on time)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--steps", o->plan.steps, "Training steps after the setup (default 3; the last is reported)")
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--predict", o->predict, "Also predict the step's time (cost model: tessera/plan/cost_model.h)");
  cmd->add_flag("--search", o->search, "Plan and predict every layout at this world size, fastest first");
  cmd->add_option("--memory-mib", o->memory_mib, "With --search: the memory per rank a layout must fit in")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--latency-us", o->latency_us, "The network's one-way latency per hop, for --predict (default 50)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--cores", o->cores, "Cores per host, for --predict (default this machine's)")->check(CLI::Range(1, 4096));
  cmd->add_option("--json", o->json_path, "Also write the whole plan (every rank, phase and collective) as JSON");
  cmd->add_option("--compare-flight", o->compare_dir,
                  "A real run's flight records (TESSERA_FLIGHT_AT_END=1): check the plan's collectives against them");
  return {cmd, [o]() -> int {
    train::TrainConfig config = train::load_config(o->config);
    for (const auto& s : o->overrides) train::apply_override(config, s);
    auto cost_inputs = [&] { return plan::measured_cost_inputs(o->link_gbit, o->latency_us, o->cores); };
    if (o->search) {
      TESSERA_CHECK(o->json_path.empty() && o->compare_dir.empty(), "[plan] --json and --compare-flight are for one "
                    "layout's plan, not --search");
      TESSERA_CHECK(o->plan.hosts == 1 || o->link_gbit > 0, "[plan] --search over ", o->plan.hosts,
                    " hosts needs the network's rate: give --link GBIT");
      const auto memory = static_cast<int64_t>(o->memory_mib * 1024 * 1024);
      const auto results = plan::search_layouts(config, o->plan, cost_inputs(), memory, [](const plan::Candidate& c) {
        if (::isatty(2)) std::fprintf(stderr, "[plan] %s\n", c.name.c_str());
      });
      std::printf("tessera plan --search: %s at %d ranks on %d host(s)%s", o->config.c_str(), o->plan.world,
                  o->plan.hosts, plan::search_text(results, memory, o->config, o->plan).c_str());
      return results.empty() || !results.front().refused.empty() || !results.front().fits ? 1 : 0;
    }
    // Read before planning: nothing the plan writes can then stand in for the run's records.
    std::vector<nlohmann::json> run_records;
    if (!o->compare_dir.empty()) run_records = dist::read_flight_records(o->compare_dir);
    const bool progress = o->plan.world > 1 && ::isatty(2);  // a bar for people, not for logs
    plan::JobPlan job = plan::make_plan(config, o->plan, o->config, [&](int r) {
      if (!progress) return;
      if (r < 0) std::fprintf(stderr, "[plan] every rank at once, for the messages between stages\n");
      else std::fprintf(stderr, "\r[plan] dry run of rank %d of %d", r + 1, o->plan.world);
    });
    if (progress) std::fprintf(stderr, "\n");
    job.link_gbit = o->link_gbit;
    std::printf("%s", plan::plan_text(job).c_str());
    nlohmann::json j = plan::plan_json(job);
    if (o->predict) {
      const plan::CostInputs inputs = cost_inputs();
      const plan::StepPrediction p = plan::predict_step(job, config, inputs);
      std::printf("%s", plan::prediction_text(p, inputs).c_str());
      j["prediction"] = plan::prediction_json(p);
    }
    if (!o->json_path.empty()) io::write_file_atomic(o->json_path, j.dump(1) + "\n");
    int status = plan::sequence_disagreement(job).empty() ? 0 : 1;
    if (!o->compare_dir.empty()) {
      int64_t compared = 0;
      const std::string differences = plan::compare_with_flight_records(job, run_records, compared);
      if (compared == 0) {
        std::printf("the run in %s shares no collective number with the plan (its records keep only the newest 512: "
                    "compare a run of a few steps)\n", o->compare_dir.c_str());
        status = 1;
      } else if (differences.empty()) {
        std::printf("the run in %s issued the planned collectives: %lld compared, all the same\n",
                    o->compare_dir.c_str(), static_cast<long long>(compared));
      } else {
        std::printf("the run in %s differs from the plan (%lld compared):\n%s", o->compare_dir.c_str(),
                    static_cast<long long>(compared), differences.c_str());
        status = 1;
      }
    }
    return status;
  }};
}

}  // namespace tessera::cli
