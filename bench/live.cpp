// `tessera bench live`: what losing one worker of four costs a DDP job, three ways, in one run:
//   tessera live      the elastic agent with live membership (the default): the survivors go on in
//                     their processes, a replacement joins (train/trainer_live.cpp);
//   tessera restart   the same job with distributed.live_membership = "off": a new generation, every
//                     worker restarted from the survivors' in-memory save;
//   torchrun          the reference: torchrun's elastic agent (--max-restarts 1) restarting every
//                     worker of a PyTorch DDP job (gloo), which resumes from its newest checkpoint
//                     (bench/torch_elastic.py).
// Each: the MLP 784-512-256-10 on Fashion-MNIST, global batch 120 over 4 workers of one thread,
// SGD(0.05, momentum 0.9), a checkpoint every 50 steps; rank 2 SIGKILLs itself after step 230.
// --strategy zero1|zero2 runs tessera's two jobs as ZeRO (live: each rank's pieces kept by its
// neighbour every step; the "step ms" column, the median step before the loss, shows that cost
// against the restart path's job, which keeps none); torchrun's job stays DDP.
// The stall is the wall time the loss cost (cost_of: the pause at the loss with any steps done
// again, and any pause later, as when a replacement joins). Steps lost: steps completed before the loss that were
// done again. Restarted: processes that survived the loss and were restarted anyway. Runs rotate
// within each repeat, so drift on this shared machine hits all three.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench.h"
#include "tessera/dist/launcher/free_port.h"

namespace tessera::bench {

namespace {

namespace fs = std::filesystem;

constexpr int kWorkers = 4, kKillRank = 2, kCheckpointEvery = 50, kGlobalBatch = 120;

struct Cost {
  double stall_s = 0, wall_s = 0, step_ms = 0;
  int64_t steps_lost = 0;
  int restarted = 0;
  bool ok = false;
};


// step -> Unix time of its record (the last one wins where a restarted job wrote a step again), and
// the first step each restart resumed after.
struct StepTimes {
  std::map<int64_t, double> at;
  int64_t resumed_from = -1;
};

double median_interval(const std::map<int64_t, double>& at, int64_t before) {
  std::vector<double> gaps;
  for (auto it = at.begin(); it != at.end() && std::next(it) != at.end(); ++it)
    if (std::next(it)->first == it->first + 1 && std::next(it)->first <= before)
      gaps.push_back(std::next(it)->second - it->second);
  return median(gaps);
}

// The time the loss cost: from the loss (`killed_at`, the end of step kill_step) on, every gap
// between consecutive steps over twice the median step, less the median step. That is the stall at
// the loss with any steps done again (a restart from a checkpoint), and any later one (a
// replacement joining).
Cost cost_of(const StepTimes& times, int64_t kill_step, double killed_at, double wall_s, int restarted) {
  Cost c;
  c.wall_s = wall_s;
  c.restarted = restarted;
  if (!times.at.count(kill_step + 1) || killed_at <= 0) return c;
  const double step = median_interval(times.at, kill_step);
  c.step_ms = 1e3 * step;
  double previous = killed_at;
  for (auto it = times.at.upper_bound(kill_step); it != times.at.end(); ++it) {
    const double gap = it->second - previous;
    if (gap > 2 * step) c.stall_s += gap - step;
    previous = it->second;
  }
  c.steps_lost = times.resumed_from >= 0 ? std::max<int64_t>(0, kill_step - times.resumed_from) : 0;
  c.ok = true;
  return c;
}

// The JSON objects of a file, one per line (a metrics.jsonl, the reference's step log).
std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_all(path));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) out.push_back(j);
  }
  return out;
}

Cost run_tessera(const LiveBenchOptions& o, const std::string& dir, bool live) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [512, 256]\n"
                                      << "[data]\ndataset = \"fashion-mnist\"\n"
                                      << "[optimizer]\nname = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n"
                                      << "[train]\nepochs = 1\nglobal_batch_size = " << kGlobalBatch
                                      << "\nmax_steps = " << o.steps << "\ncheckpoint_every = " << kCheckpointEvery
                                      << "\nthreads = 1\nlog_every = 100000\noutput_dir = \"" << dir << "/run\"\n"
                                      << "[distributed]\ntimeout_s = 60\nlive_membership = \"" << (live ? "auto" : "off")
                                      << "\"\n"
                                      << (o.strategy == "ddp" ? std::string()
                                                              : "strategy = \"zero\"\nzero_stage = " + o.strategy.substr(4) + "\n");
  const std::string bin = fs::read_symlink("/proc/self/exe").string();
  const std::string cmd = bin + " run --nnodes 1:1 --nproc-per-node " + std::to_string(kWorkers) +
                          " --rdzv-backend store --rdzv-endpoint 127.0.0.1:" + std::to_string(dist::launcher::pick_free_port("127.0.0.1")) +
                          " --rdzv-id bench-live --max-restarts 1 --grace-period 2 -- " + bin + " train " + dir +
                          "/config.toml --resume auto --set distributed.debug_kill_rank=" + std::to_string(kKillRank) +
                          " --set distributed.debug_kill_step=" + std::to_string(o.kill_step) + " > " + dir +
                          "/job.log 2>&1";
  const auto start = std::chrono::steady_clock::now();
  const CommandOutput run = run_capture(cmd, o.timeout_s);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!run.ok) {
    std::fprintf(stderr, "bench live: the tessera job failed; its log: %s/job.log\n", dir.c_str());
    return {};
  }
  StepTimes times;
  bool restarted = false;
  for (const auto& r : json_lines(dir + "/run/metrics.jsonl")) {
    const std::string type = r.value("type", "");
    // Steps up to the loss count from the first run only: those done again after a restart from a
    // checkpoint are part of the stall (as torchrun's attempt 0 below).
    const int64_t step = r.value("step", int64_t{-1});
    if (type == "step" && (step > o.kill_step || !restarted)) times.at[step] = r["unix_time"].get<double>();
    if (type == "start" && r.value("resumed", false)) {
      times.resumed_from = r["step"].get<int64_t>();
      restarted = true;
    }
    if (type == "membership" && times.resumed_from < 0) times.resumed_from = r["step"].get<int64_t>();
  }
  // The loss comes right after step kill_step on the killed rank: its record is the moment (the
  // restart path writes none for it: the step's closing collective failed; one step after the one
  // before is then the moment).
  double killed_at = 0;
  if (times.at.count(o.kill_step))
    killed_at = times.at[o.kill_step];
  else if (times.at.count(o.kill_step - 1))
    killed_at = times.at[o.kill_step - 1] + median_interval(times.at, o.kill_step - 1);
  return cost_of(times, o.kill_step, killed_at, wall, live ? 0 : kWorkers - 1);
}

Cost run_torchrun(const LiveBenchOptions& o, const std::string& dir, std::string* version) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string torchrun = fs::path(o.python).parent_path() / "torchrun";
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/bench/torch_elastic.py";
  const std::string cmd = "env PYTHONPATH=" + std::string(TESSERA_SOURCE_DIR) + "/bench OMP_NUM_THREADS=1 " + torchrun +
                          " --nnodes 1:1 --nproc-per-node " + std::to_string(kWorkers) +
                          " --max-restarts 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
                          std::to_string(dist::launcher::pick_free_port("127.0.0.1")) + " " + script + " --ckpt-dir " + dir + " --step-log " + dir +
                          "/steps.jsonl --steps " + std::to_string(o.steps) + " --kill-step " +
                          std::to_string(o.kill_step) + " --kill-rank " + std::to_string(kKillRank) +
                          " --checkpoint-every " + std::to_string(kCheckpointEvery) + " --global-batch " +
                          std::to_string(kGlobalBatch) + " 2> " + dir + "/job.err";
  const auto start = std::chrono::steady_clock::now();
  const CommandOutput run = run_capture(cmd, o.timeout_s);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!run.ok) {
    std::fprintf(stderr, "bench live: torchrun failed (scripts/setup.sh --bench installs PyTorch): %s\n",
                 read_all(dir + "/job.err").substr(0, 2000).c_str());
    return {};
  }
  if (const nlohmann::json last = last_json_line(run.out); last.is_object())
    *version = last.value("torch_version", *version);
  StepTimes times;
  int64_t last_attempt = 0;
  for (const auto& r : json_lines(dir + "/steps.jsonl")) {
    const int64_t attempt = r.value("attempt", int64_t{0});
    if (attempt > last_attempt && times.resumed_from < 0) times.resumed_from = r["step"].get<int64_t>() - 1;
    last_attempt = std::max(last_attempt, attempt);
    if (attempt == 0 || r["step"].get<int64_t>() > o.kill_step) times.at[r["step"].get<int64_t>()] = r["t"].get<double>();
  }
  double killed_at = 0;
  for (const auto& k : json_lines(dir + "/steps.jsonl.kill")) killed_at = k.value("t", 0.0);
  return cost_of(times, o.kill_step, killed_at, wall, kWorkers - 1);
}

std::string cell(const std::vector<double>& v, const char* format) {
  if (v.empty()) return "-";
  char s[96];
  std::snprintf(s, sizeof s, format, median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  return s;
}

}  // namespace

int live(const LiveBenchOptions& o) {
  if (::access("/usr/share/datasets/fashion-mnist", R_OK) != 0) {
    std::fprintf(stderr, "bench live: Fashion-MNIST is not installed (scripts/setup.sh installs dataset-fashion-mnist)\n");
    return 1;
  }
  std::printf("tessera bench live: %d workers x 1 thread, MLP 784-512-256-10 on Fashion-MNIST, global batch %d, %d "
              "steps, rank %d SIGKILLed after step %d, checkpoint every %d steps; tessera's strategy %s; median "
              "[min-max] of %d repeats\n",
              kWorkers, kGlobalBatch, o.steps, kKillRank, o.kill_step, kCheckpointEvery, o.strategy.c_str(), o.repeats);
  const std::string base = (fs::temp_directory_path() / ("tessera-bench-live-" + std::to_string(::getpid()))).string();
  std::map<std::string, std::vector<Cost>> costs;
  std::string version;
  for (int r = 0; r < o.repeats; ++r) {
    costs["tessera live"].push_back(run_tessera(o, base + "/live", true));
    costs["tessera restart"].push_back(run_tessera(o, base + "/restart", false));
    if (o.with_torch) costs["torchrun"].push_back(run_torchrun(o, base + "/torch", &version));
  }
  std::vector<double> torch_stall;
  for (const Cost& c : costs["torchrun"])
    if (c.ok) torch_stall.push_back(c.stall_s);
  std::printf("%-16s %-22s %-10s %-11s %-10s %-22s %-22s\n", "", "stall s", "vs torchrun", "steps lost", "restarted",
              "job wall s", "step ms");
  for (const char* name : {"tessera live", "tessera restart", "torchrun"}) {
    std::vector<double> stall, wall, lost, restarted, step;
    for (const Cost& c : costs[name]) {
      if (!c.ok) continue;
      step.push_back(c.step_ms);
      stall.push_back(c.stall_s);
      wall.push_back(c.wall_s);
      lost.push_back(static_cast<double>(c.steps_lost));
      restarted.push_back(c.restarted);
    }
    char ratio[32] = "-";
    if (!stall.empty() && !torch_stall.empty() && median(stall) > 0)
      std::snprintf(ratio, sizeof ratio, "%.1fx less", median(torch_stall) / median(stall));
    std::printf("%-16s %-22s %-10s %-11s %-10s %-22s %-22s\n", name, cell(stall, "%.2f [%.2f-%.2f]").c_str(),
                std::string(name) == "torchrun" ? "1" : ratio, cell(lost, "%.0f [%.0f-%.0f]").c_str(),
                cell(restarted, "%.0f").c_str(), cell(wall, "%.1f [%.1f-%.1f]").c_str(),
                cell(step, "%.2f [%.2f-%.2f]").c_str());
  }
  if (o.with_torch) std::printf("reference: torchrun of pytorch %s\n", version.empty() ? "(did not run)" : version.c_str());
  fs::remove_all(base);
  return 0;
}

}  // namespace tessera::bench
