// tessera plan CONFIG --world N [--hosts H] [--link RATE] [--steps S] [--json PATH] [--compare-flight DIR]:
// the job's dry run at N ranks on this one machine (tessera/plan/job_plan.h): memory per rank by
// category, each step's collectives, the bytes on each kind of link, and the proof that every rank
// issues the same collectives. --compare-flight checks the plan against a real run's flight records.
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "tessera/dist/flight_report.h"
#include "tessera/io/atomic_file.h"
#include "tessera/plan/job_plan.h"
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
  cmd->add_option("--json", o->json_path, "Also write the whole plan (every rank, phase and collective) as JSON");
  cmd->add_option("--compare-flight", o->compare_dir,
                  "A real run's flight records (TESSERA_FLIGHT_AT_END=1): check the plan's collectives against them");
  return {cmd, [o]() -> int {
    train::TrainConfig config = train::load_config(o->config);
    for (const auto& s : o->overrides) train::apply_override(config, s);
    const bool progress = o->plan.world > 1 && ::isatty(2);  // a bar for people, not for logs
    plan::JobPlan job = plan::make_plan(config, o->plan, o->config, [&](int r) {
      if (!progress) return;
      if (r < 0) std::fprintf(stderr, "[plan] every rank at once, for the messages between stages\n");
      else std::fprintf(stderr, "\r[plan] dry run of rank %d of %d", r + 1, o->plan.world);
    });
    if (progress) std::fprintf(stderr, "\n");
    job.link_gbit = o->link_gbit;
    std::printf("%s", plan::plan_text(job).c_str());
    if (!o->json_path.empty()) io::write_file_atomic(o->json_path, plan::plan_json(job).dump(1) + "\n");
    int status = plan::sequence_disagreement(job).empty() ? 0 : 1;
    if (!o->compare_dir.empty()) {
      int64_t compared = 0;
      const std::string differences =
          plan::compare_with_flight_records(job, dist::read_flight_records(o->compare_dir), compared);
      if (differences.empty()) {
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
