// tessera tune CONFIG --space SPACE.toml --trials N --parallel P: hyper-parameter search (Ray Tune's
// job). Trials are `tessera train` runs of this same binary, P at a time (each may itself be
// distributed: --nproc), with random (or --grid) values of the space's keys; ASHA (tune/asha.h)
// stops the bad ones early, rung by rung in epochs, resuming a promoted trial from its checkpoint.
// Every finished rung is a line of OUT/tune.jsonl, read back on a restart so that a search resumes;
// a trial that crashes is recorded as failed, never the end of the search. With --backend ray the same
// trials (the same draws) run as Ray Tune trials under Ray's ASHA (python/tessera/ray/_tune.py).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/ray_launch.h"
#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/train/config.h"
#include "tessera/tune/asha.h"
#include "tessera/tune/search_space.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct TuneOptions {
  std::string config, space, out = "runs/tune", metric = "eval_accuracy", mode = "max", scheduler = "asha";
  std::string backend = "local", address;  // ray: Ray Tune runs the trials, on the cluster at address
  std::vector<std::string> overrides;
  int64_t trials = 16, parallel = 1, nproc = 1, eta = 3, min_epochs = 1, seed = 0;
  bool grid = false;
  double trial_timeout_s = 3600;
};

struct Job {
  pid_t pid = -1;
  int64_t trial = 0;
  int rung = 0;
  int64_t steps_before = 0;
  Clock::time_point started;
};

// The last epoch record of a trial's metrics.jsonl: {epoch, step, metric}.
struct EpochResult {
  int64_t epoch = -1, step = 0;
  double metric = std::numeric_limits<double>::quiet_NaN();
};

EpochResult last_epoch(const fs::path& metrics, const std::string& key) {
  EpochResult r;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("type", "") != "epoch") continue;
    r.epoch = j.value("epoch", int64_t(-1));
    r.step = j.value("step", int64_t(0));
    r.metric = j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::numeric_limits<double>::quiet_NaN();
  }
  return r;
}

std::string trial_dir(const TuneOptions& o, int64_t trial) {
  char name[32];
  std::snprintf(name, sizeof name, "trial-%04lld", static_cast<long long>(trial));
  return (fs::path(o.out) / name).string();
}

pid_t start_job(const TuneOptions& o, const std::vector<std::string>& params, int64_t trial, int64_t epochs, bool resume) {
  std::vector<std::string> args{"/proc/self/exe", "train", o.config};
  for (const auto& s : o.overrides) args.insert(args.end(), {"--set", s});
  for (const auto& s : params) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), {"--set", "train.output_dir=\"" + trial_dir(o, trial) + "\"", "--set",
                           "train.epochs=" + std::to_string(epochs)});
  if (resume) args.insert(args.end(), {"--resume", "latest"});
  else args.push_back("--overwrite");
  if (o.nproc > 1) args.insert(args.end(), {"--nproc", std::to_string(o.nproc)});
  fs::create_directories(trial_dir(o, trial));
  const std::string log = trial_dir(o, trial) + "/log.txt";
  const pid_t pid = fork();
  if (pid < 0) throw Error("[tune] fork failed for trial " + std::to_string(trial));
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "a", stdout);
    if (f) dup2(fileno(stdout), 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// The search handed to Ray Tune: the drawn trials and the scheduler's settings in OUT/ray-search.json
// (the one contract with python/tessera/ray/_tune.py), then this process becomes its driver.
int run_tune_on_ray(const TuneOptions& o, const std::vector<std::vector<std::string>>& trials, int64_t max_epochs) {
  fs::create_directories(o.out);
  const nlohmann::json search{{"config", fs::absolute(o.config).string()}, {"overrides", o.overrides},
                              {"trials", trials}, {"max_epochs", max_epochs},
                              {"min_epochs", o.scheduler == "asha" ? std::min(o.min_epochs, max_epochs) : max_epochs},
                              {"eta", o.eta}, {"scheduler", o.scheduler}, {"metric", o.metric}, {"mode", o.mode},
                              {"parallel", o.parallel}, {"nproc", o.nproc}, {"trial_timeout_s", o.trial_timeout_s},
                              {"out", fs::absolute(o.out).string()}};
  const fs::path path = fs::path(o.out) / "ray-search.json";
  io::write_file_atomic(path.string(), search.dump(2) + "\n");
  std::vector<std::string> args{"tune", fs::absolute(path).string()};
  if (!o.address.empty()) args.insert(args.end(), {"--address", o.address});
  std::fflush(stdout);
  return exec_ray_driver(args);
}

int run_tune(const TuneOptions& o) {
  TESSERA_CHECK(o.parallel >= 1 && o.trials >= 1, "[tune] --trials and --parallel must be at least 1");
  TESSERA_CHECK(o.mode == "max" || o.mode == "min", "[tune] --mode is max or min, got '", o.mode, "'");
  TESSERA_CHECK(o.scheduler == "asha" || o.scheduler == "none", "[tune] --scheduler is asha or none, got '", o.scheduler, "'");
  TESSERA_CHECK(o.backend == "local" || o.backend == "ray", "[tune] --backend is local or ray, got '", o.backend, "'");
  TESSERA_CHECK(o.address.empty() || o.backend == "ray", "[tune] --address is an option of --backend ray");
  train::TrainConfig base = train::load_config(o.config);
  for (const auto& s : o.overrides) train::apply_override(base, s);
  std::ifstream space_in(o.space);
  if (!space_in) throw IoError("[tune] cannot open the search space " + o.space);
  std::stringstream text;
  text << space_in.rdbuf();
  const std::vector<tune::Dimension> space = tune::parse_search_space(text.str(), o.space);
  std::vector<std::vector<std::string>> trials;
  if (o.grid) {
    trials = tune::grid_trials(space);
  } else {
    std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
    for (int64_t i = 0; i < o.trials; ++i) trials.push_back(tune::sample_trial(space, rng));
  }
  // Every trial's values are checked as a config before any runs (a bad range fails now, not later).
  for (const auto& t : trials) {
    train::TrainConfig c = base;
    for (const auto& s : t) train::apply_override(c, s);
    train::validate(c);
  }
  const int64_t max_epochs = base.train.epochs;
  // Built (and so checked: eta >= 2, epochs >= 1) for either backend.
  tune::Asha asha({.min_epochs = o.scheduler == "asha" ? std::min(o.min_epochs, max_epochs) : max_epochs,
                   .max_epochs = max_epochs, .eta = o.eta, .maximize = o.mode == "max"});
  if (o.backend == "ray") return run_tune_on_ray(o, trials, max_epochs);
  fs::create_directories(o.out);
  const fs::path table = fs::path(o.out) / "tune.jsonl";

  // A restart: what tune.jsonl says was done is done.
  std::map<int64_t, int> reached;  // trial -> highest rung completed
  int64_t steps_total = 0;
  if (std::ifstream in(table); in) {
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("trial")) continue;
      const int64_t t = j["trial"].get<int64_t>();
      const int rung = j["rung"].get<int>();
      asha.report(t, rung, j["status"] == "ok" ? j["metric"].get<double>() : std::numeric_limits<double>::quiet_NaN());
      reached[t] = std::max(reached.count(t) ? reached[t] : -1, rung);
      steps_total += j.value("steps", int64_t(0));
    }
    // Promotions already done are implied by a higher rung's record.
    for (const auto& [t, rung] : reached)
      for (int k = 0; k < rung; ++k) asha.mark_promoted(t, k);
    if (!reached.empty()) std::printf("tune: resuming: %zu trial(s) already in %s\n", reached.size(), table.string().c_str());
  }
  std::ofstream out(table, std::ios::app);
  int64_t next_trial = 0;
  while (next_trial < static_cast<int64_t>(trials.size()) && reached.count(next_trial)) ++next_trial;
  std::vector<Job> running;
  auto launch = [&]() -> bool {
    if (auto p = asha.promote()) {
      const auto [trial, rung] = *p;
      const int64_t steps = last_epoch(fs::path(trial_dir(o, trial)) / "metrics.jsonl", o.metric).step;
      running.push_back({start_job(o, trials[static_cast<size_t>(trial)], trial, asha.rung_epochs()[static_cast<size_t>(rung)], true),
                         trial, rung, steps, Clock::now()});
      return true;
    }
    if (next_trial >= static_cast<int64_t>(trials.size())) return false;
    const int64_t trial = next_trial++;
    running.push_back({start_job(o, trials[static_cast<size_t>(trial)], trial, asha.rung_epochs()[0], false), trial, 0, 0,
                       Clock::now()});
    return true;
  };
  while (true) {
    while (static_cast<int64_t>(running.size()) < o.parallel && launch()) {
    }
    if (running.empty()) break;
    // Reap whatever finished; kill what ran past --trial-timeout (recorded as failed).
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done <= 0) {
      for (Job& j : running)
        if (Clock::now() - j.started > std::chrono::duration<double>(o.trial_timeout_s)) kill(j.pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    auto it = std::find_if(running.begin(), running.end(), [&](const Job& j) { return j.pid == done; });
    if (it == running.end()) continue;
    const Job job = *it;
    running.erase(it);
    const int64_t epochs = asha.rung_epochs()[static_cast<size_t>(job.rung)];
    const EpochResult r = last_epoch(fs::path(trial_dir(o, job.trial)) / "metrics.jsonl", o.metric);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && r.epoch == epochs && !std::isnan(r.metric);
    const int64_t steps = std::max<int64_t>(0, r.step - job.steps_before);
    steps_total += steps;
    asha.report(job.trial, job.rung, ok ? r.metric : std::numeric_limits<double>::quiet_NaN());
    nlohmann::json params = nlohmann::json::object();
    for (const auto& s : trials[static_cast<size_t>(job.trial)]) params[s.substr(0, s.find('='))] = s.substr(s.find('=') + 1);
    nlohmann::json record{{"trial", job.trial}, {"params", params}, {"rung", job.rung}, {"epochs", epochs},
                          {"status", ok ? "ok" : "failed"}, {"steps", steps},
                          {"seconds", std::chrono::duration<double>(Clock::now() - job.started).count()}};
    if (ok) record["metric"] = r.metric;
    else record["exit"] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    out << record.dump() << "\n" << std::flush;
    std::printf("tune: trial %lld rung %d (%lld epochs): %s %s\n", static_cast<long long>(job.trial), job.rung,
                static_cast<long long>(epochs), ok ? (o.metric + " " + std::to_string(r.metric)).c_str() : "FAILED (see",
                ok ? "" : (trial_dir(o, job.trial) + "/log.txt)").c_str());
    std::fflush(stdout);
  }
  auto best = asha.best();
  if (!best) {
    std::printf("tune: every trial failed; their logs are in %s/trial-*/log.txt\n", o.out.c_str());
    return 1;
  }
  std::string values;
  for (const auto& s : trials[static_cast<size_t>(best->trial)]) values += " " + s;
  std::printf("tune: best trial %lld (%s %.4f after %lld epochs):%s; %lld training steps in all; table %s\n",
              static_cast<long long>(best->trial), o.metric.c_str(), best->metric,
              static_cast<long long>(asha.rung_epochs()[static_cast<size_t>(best->rung)]), values.c_str(),
              static_cast<long long>(steps_total), table.string().c_str());
  return 0;
}

}  // namespace

Command add_tune_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tune", "Hyper-parameter search: random or grid, with ASHA early stopping");
  auto o = std::make_shared<TuneOptions>();
  cmd->add_option("config", o->config, "The base config (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--space", o->space, "The search space (TOML: [section.key] log_uniform/uniform/int/choice/grid)")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--trials", o->trials, "Random trials to draw")->capture_default_str();
  cmd->add_flag("--grid", o->grid, "Try every combination of the space's grid values instead");
  cmd->add_option("--parallel", o->parallel, "Trials running at once")->capture_default_str();
  cmd->add_option("--nproc", o->nproc, "Processes per trial (tessera train --nproc)")->capture_default_str();
  cmd->add_option("--scheduler", o->scheduler, "asha (early stopping) or none (every trial to train.epochs)")
      ->capture_default_str();
  cmd->add_option("--metric", o->metric, "The epoch record's key to compare (metrics.jsonl)")->capture_default_str();
  cmd->add_option("--mode", o->mode, "max or min")->capture_default_str();
  cmd->add_option("--eta", o->eta, "ASHA: keep the top 1/eta of each rung")->capture_default_str();
  cmd->add_option("--min-epochs", o->min_epochs, "ASHA: epochs of the bottom rung")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the random draws")->capture_default_str();
  cmd->add_option("--out", o->out, "Directory of the trials and tune.jsonl")->capture_default_str();
  cmd->add_option("--set", o->overrides, "Override a key of every trial (repeatable)");
  cmd->add_option("--trial-timeout", o->trial_timeout_s, "Seconds before a trial is killed (then failed)")
      ->capture_default_str();
  cmd->add_option("--backend", o->backend,
                  "local (trials as processes of this machine) or ray (the same trials as Ray Tune trials under Ray's "
                  "ASHA, on the Ray cluster of --address)")
      ->capture_default_str();
  cmd->add_option("--address", o->address, "With --backend ray: the Ray cluster, HOST:PORT (else RAY_ADDRESS, else a "
                                           "Ray started for the search)");
  return {cmd, [o] { return run_tune(*o); }};
}

}  // namespace tessera::cli
