#include "tessera/train/run.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "tessera/dist/flight_recorder.h"
#include "tessera/dist/init.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/slurm_env.h"
#include "tessera/io/checkpoint.h"
#include "tessera/train/elastic_report.h"
#include "tessera/train/ps_job.h"
#include "tessera/util/settings.h"

namespace tessera::train {

namespace {

extern "C" void on_stop_signal(int) { Trainer::request_stop(); }

// A process the launcher started in a lost worker's slot of a live job (trainer_live.cpp).
bool is_live_joiner() { return dist::launcher::has_worker_rank() && env_flag(dist::launcher::kLiveJoinerVariable, false); }

dist::ProcessGroupPtr init_group(const TrainConfig& config) {
  dist::InitOptions init;
  init.backend = config.distributed.backend;
  init.timeout = collective_timeout(config);
  // A job that may run with live membership regroups as soon as a collective fails: no waiting for
  // the others' reports first (the trainer decides whether it does: trainer_live.cpp).
  const std::string& live = config.distributed.live_membership;
  const auto& d = config.distributed;
  const bool data_parallel = !uses_model_parallelism(config) && config.parallel.ep <= 1 && config.parallel.cp <= 1;
  const bool carried = data_parallel && ((d.strategy == "ddp" && d.local_sgd == 0) ||
                                         (d.strategy == "zero" && d.zero_stage < 3));  // Trainer::wants_live_membership's
  init.wait_for_failure_reports = !carried || live == "off" || (live == "auto" && !under_the_elastic_agent());
  return dist::init_process_group(init);
}

std::unique_ptr<Trainer> make_trainer(const TrainConfig& config) {
  if (config.distributed.strategy == "ps") {
    const auto role = dist::launcher::ps_role_from_environment();
    return std::make_unique<Trainer>(config, ps_client_options_from_env(config), role.num_workers);
  }
  if (uses_model_parallelism(config) && !dist::launched_as_job()) {
    const int64_t needed = config.parallel.pp * config.parallel.tp * std::max<int64_t>(1, config.parallel.dp);
    throw ValueError("[train] parallel.pp = " + std::to_string(config.parallel.pp) + " and parallel.tp = " +
                     std::to_string(config.parallel.tp) + " need at least " + std::to_string(needed) +
                     " processes: add --nproc " + std::to_string(needed));
  }
  // A replacement for a lost worker of a live job joins the running job (null: it had ended).
  if (is_live_joiner()) return Trainer::join_live_job(config);
  if (dist::launched_as_job()) return std::make_unique<Trainer>(config, init_group(config));
  // A job that asked Slurm for several tasks, running this in its batch script (or salloc's shell)
  // without srun: one process trains, and the user should know the other tasks sit idle.
  if (const int tasks = dist::launcher::slurm_batch_script_tasks(dist::launcher::slurm_environment()); tasks > 1)
    std::fprintf(stderr,
                 "[train] warning: this runs in the batch script of a Slurm job of %d tasks, not under srun: it "
                 "trains as ONE process. Start it with `srun tessera train ...` (one process per task), or "
                 "`tessera train --nproc N` for N processes on this node\n",
                 tasks);
  return std::make_unique<Trainer>(config, nullptr);
}

}  // namespace

RunOutcome run(const TrainConfig& config, const RunOptions& options) {
  RunOutcome outcome;
  const auto role = dist::launcher::ps_role_from_environment();
  if (role.role == dist::launcher::PsRoleEnv::Role::kServer) {
    run_parameter_server(config, role);
    outcome.server = true;
    return outcome;
  }
  // The flight records of this run's process groups (dist/flight_recorder.h) go beside its metrics,
  // unless TESSERA_FLIGHT_DIR says otherwise; SIGUSR2 makes them write one now.
  dist::set_flight_recorder_dir((std::filesystem::path(config.train.output_dir) / "flight").string());
  if (options.stop_on_signals) dist::install_flight_recorder_signal();
  std::unique_ptr<Trainer> trainer = make_trainer(config);
  if (!trainer) return outcome;  // a live job's replacement that came after the end
  const bool lead = trainer->rank() == 0;
  // A live job's joiner takes the members' state, never a checkpoint.
  const bool joiner = is_live_joiner();
  // "auto" (an elastic job's restarted workers): the newest checkpoint that reads back whole, never
  // one that fails its checksums; a fresh start only where there is none at all.
  std::string resume_from = options.resume == "latest" ? "" : options.resume;
  if (options.resume == "auto" && !joiner) {
    std::vector<std::string> skipped;
    resume_from = io::newest_verified_checkpoint(
        (std::filesystem::path(config.train.output_dir) / "checkpoints").string(), &skipped);
    for (const std::string& why : skipped) std::fprintf(stderr, "[resume] skipped: %s\n", why.c_str());
  }
  const bool fresh = joiner || options.resume.empty() || (options.resume == "auto" && resume_from.empty());
  if (!fresh) {
    trainer->resume(resume_from);
    if (lead) std::fprintf(stderr, "resumed at step %lld\n", static_cast<long long>(trainer->global_step()));
  }
  // The handlers before ours come back afterwards (Python's KeyboardInterrupt for tessera.train.run).
  void (*previous_int)(int) = SIG_DFL;
  void (*previous_term)(int) = SIG_DFL;
  if (options.stop_on_signals) {
    previous_int = std::signal(SIGINT, on_stop_signal);
    previous_term = std::signal(SIGTERM, on_stop_signal);
  }
  outcome.fit = trainer->fit();
  // The whole run's collectives, for `tessera plan --compare-flight` (the ring keeps the newest 512).
  if (env_flag("TESSERA_FLIGHT_AT_END", false)) dist::ProcessGroup::dump_all_flight_records("end of training");
  if (options.stop_on_signals) {
    std::signal(SIGINT, previous_int);
    std::signal(SIGTERM, previous_term);
  }
  const FitResult& r = outcome.fit;
  const bool lead_at_end = trainer->rank() == 0;  // a live job's rank 0 may have changed
  outcome.interrupted = r.stopped_early && !(config.train.max_steps > 0 && r.steps >= config.train.max_steps);
  // An interrupted run (Ctrl-C, or an elastic agent's SIGTERM before a resize) is not final: its
  // latest evaluation is reported as such, so the one "final" line is the finished run's.
  const char* which = outcome.interrupted ? "latest (interrupted at step " : "final";
  const std::string at = outcome.interrupted ? std::to_string(r.steps) + ")" : "";
  if (r.last_eval && lead_at_end) {
    if (trainer->vocabulary())
      std::printf("%s%s validation loss %.4f\n", which, at.c_str(), r.last_eval->loss);
    else if (std::isnan(r.last_eval->accuracy))
      std::printf("%s%s test loss (MSE) %.4f on %lld samples\n", which, at.c_str(), r.last_eval->loss,
                  static_cast<long long>(r.last_eval->samples));
    else
      std::printf("%s%s test accuracy %.2f%% (loss %.4f) on %lld samples\n", which, at.c_str(),
                  100.0 * r.last_eval->accuracy, r.last_eval->loss, static_cast<long long>(r.last_eval->samples));
  }
  if (lead_at_end) std::printf("checkpoint: %s\n", r.last_checkpoint.c_str());
  return outcome;
}

}  // namespace tessera::train
