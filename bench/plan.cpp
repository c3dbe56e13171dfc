// tessera bench plan: how well `tessera plan --predict` predicts real jobs. Each layout runs twice:
// really (`tessera train --nproc N`, STEPS steps, the step time the median gap between the step
// records from step 6 on: everything a step costs, its metrics included) and as a plan (the dry run
// and the cost model, in this process). The table gives both and the error; below it the mean
// absolute percentage error and, per world size, Spearman's rank correlation of the layouts'
// predicted and measured times (issue 50's targets: at most 10% and at least 0.9).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "tessera/core/error.h"
#include "tessera/plan/cost_model.h"
#include "tessera/train/config.h"

namespace tessera::bench {

namespace {

namespace fs = std::filesystem;
using tessera::detail::concat;

constexpr int64_t kPlanMlpBatch = 128, kPlanGptBatch = 16;  // samples (sequences) per step, over the job

struct Layout {
  std::string name, model;
  int world = 1;
  std::vector<std::string> sets;
};

// "model:layout:world" -> the overrides that make it.
Layout parse_layout(const std::string& text) {
  std::stringstream in(text);
  std::string model, kind, world;
  std::getline(in, model, ':');
  std::getline(in, kind, ':');
  std::getline(in, world, ':');
  TESSERA_CHECK(!model.empty() && !kind.empty() && !world.empty(), "[bench plan] a layout is model:layout:world, got '",
                text, "'");
  Layout l{text, model, std::stoi(world), {}};
  TESSERA_CHECK(model == "mlp" || model == "gpt", "[bench plan] model ", model, " is not mlp or gpt");
  TESSERA_CHECK(l.world >= 1, "[bench plan] world ", l.world, " in '", text, "'");
  int replicas = l.world;
  if (kind == "ddp") {
  } else if (kind == "zero1" || kind == "zero2" || kind == "zero3") {
    l.sets = {"distributed.strategy=zero", concat("distributed.zero_stage=", kind.back())};
  } else if (kind.rfind("mesh-", 0) == 0) {  // mesh-dpXppYtpZ
    int dp = 1, pp = 1, tp = 1;
    TESSERA_CHECK(std::sscanf(kind.c_str(), "mesh-dp%dpp%dtp%d", &dp, &pp, &tp) == 3, "[bench plan] ", kind,
                  " is not mesh-dpXppYtpZ");
    TESSERA_CHECK(dp * pp * tp == l.world, "[bench plan] ", kind, " is not ", l.world, " ranks");
    l.sets = {"distributed.strategy=mesh", concat("parallel.dp=", dp), concat("parallel.pp=", pp),
              concat("parallel.tp=", tp)};
    replicas = dp;
  } else {
    throw ValueError(concat("[bench plan] layout ", kind, " is not ddp, zero1-3 or mesh-dpXppYtpZ"));
  }
  // Every layout of a model trains the same global batch, each replica its share.
  const int64_t global = model == "mlp" ? kPlanMlpBatch : kPlanGptBatch;
  TESSERA_CHECK(global % replicas == 0, "[bench plan] ", replicas, " replicas cannot share a batch of ", global);
  l.sets.push_back(concat("train.batch_size=", global / replicas));
  return l;
}

std::string write_configs(const fs::path& dir, int steps) {
  {
    std::ofstream out(dir / "corpus.txt");
    for (int i = 0; i < 400; ++i)
      out << "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
             "want of a wife.\n";
  }
  std::ofstream(dir / "mlp.toml") << "[model]\nname = \"mlp\"\nhidden = [1024, 1024]\n"
                                  << "[data]\ndataset = \"synthetic\"\nsamples = 16384\ntest_samples = 64\nclasses = 10\n"
                                  << "[optimizer]\nname = \"adam\"\nlr = 0.001\n"
                                  << "[train]\nepochs = 1\nmax_steps = " << steps
                                  << "\nthreads = 1\nlog_every = 1000\n";
  std::ofstream(dir / "gpt.toml") << "[model]\nname = \"transformer\"\nlayers = 4\nheads = 4\nembed_dim = 128\ncontext = 64\n"
                                  << "dropout = 0.0\n[data]\ndataset = \"text\"\npath = \"" << (dir / "corpus.txt").string()
                                  << "\"\n[optimizer]\nname = \"adamw\"\nlr = 0.001\n"
                                  << "[train]\nepochs = 1\nmax_steps = " << steps
                                  << "\nthreads = 1\nlog_every = 1000\n[parallel]\nmicrobatches = 4\n";
  return dir.string();
}

// The median gap between step records from step 6 on, in seconds; NaN when the run wrote too few.
double measured_step(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::vector<std::pair<int64_t, double>> steps;
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_object() && r.value("type", "") == "step") steps.emplace_back(r.value("step", int64_t{0}), r.value("unix_time", 0.0));
  }
  std::vector<double> gaps;
  for (size_t i = 1; i < steps.size(); ++i)
    if (steps[i].first > 6) gaps.push_back(steps[i].second - steps[i - 1].second);
  return gaps.size() < 3 ? std::nan("") : median(gaps);
}

// Spearman's rho of two lists (ranks by value, ties not averaged: times are never equal here).
double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = a.size();
  if (n < 2) return std::nan("");
  auto ranks = [n](const std::vector<double>& v) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(n);
    for (size_t i = 0; i < n; ++i) r[order[i]] = static_cast<double>(i);
    return r;
  };
  const auto ra = ranks(a), rb = ranks(b);
  double d2 = 0;
  for (size_t i = 0; i < n; ++i) d2 += (ra[i] - rb[i]) * (ra[i] - rb[i]);
  const double nn = static_cast<double>(n);
  return 1 - 6 * d2 / (nn * (nn * nn - 1));
}

}  // namespace

int plan(const PlanBenchOptions& o) {
  std::vector<Layout> layouts;
  std::stringstream list(o.layouts);
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) layouts.push_back(parse_layout(item));
  const fs::path dir = o.dir.empty() ? fs::temp_directory_path() / concat("tessera-bench-plan-", ::getpid()) : fs::path(o.dir);
  fs::create_directories(dir);
  write_configs(dir, o.steps);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const plan::CostInputs inputs = plan::measured_cost_inputs(0, 0, 0);  // one host: no network
  std::printf("tessera bench plan: %d steps per real run, %d cores (each %.2fx slower when all are busy); shared memory "
              "%.1f us a hop, %.2f GB/s\n",
              o.steps, inputs.cores_per_host, inputs.core_sharing_slowdown, inputs.shared_memory.latency_s * 1e6,
              inputs.shared_memory.bytes_per_s / 1e9);
  std::printf("%-24s %12s %12s %8s   %s\n", "layout", "predicted", "measured", "error", "predicted parts (compute, waiting for cores, bubble, communication)");
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> by_world;
  std::vector<double> errors;
  for (const Layout& l : layouts) {
    const std::string config_path = (dir / (l.model + ".toml")).string();
    train::TrainConfig config = train::load_config(config_path);
    for (const auto& s : l.sets) train::apply_override(config, s);
    plan::PlanOptions po;
    po.world = l.world;
    po.steps = 6;  // the compute: the median of steps 2-6
    plan::StepPrediction p;
    try {
      p = plan::predict_step(plan::make_plan(config, po, config_path), config, inputs);
    } catch (const std::exception& e) {
      std::printf("%-24s the plan failed: %s\n", l.name.c_str(), e.what());
      continue;
    }
    const fs::path out = dir / ("run-" + std::to_string(&l - layouts.data()));
    fs::remove_all(out);
    std::string cmd = concat(self, " train ", config_path, " --nproc ", l.world, " --set train.output_dir=", out.string());
    for (const auto& s : l.sets) cmd += " --set " + s;
    const CommandOutput run = run_capture(cmd + " 2>&1", 1800);
    const double real = run.ok ? measured_step(out / "metrics.jsonl") : std::nan("");
    const double error = (p.step_s - real) / real;
    std::printf("%-24s %9.2f ms %9.2f ms %+7.1f%%   %.2f, %.2f, %.2f, %.2f ms%s\n", l.name.c_str(), p.step_s * 1e3,
                real * 1e3, 100 * error, p.compute_s * 1e3, p.sharing_s * 1e3, p.bubble_s * 1e3, p.communication_s * 1e3,
                run.ok ? "" : "  (the run failed)");
    std::fflush(stdout);
    if (!std::isfinite(real)) continue;
    errors.push_back(std::fabs(error));
    by_world[l.world].first.push_back(p.step_s);
    by_world[l.world].second.push_back(real);
  }
  double mape = 0;
  for (double e : errors) mape += e;
  if (!errors.empty()) std::printf("mean absolute percentage error: %.1f%% over %zu layouts\n", 100 * mape / errors.size(), errors.size());
  for (const auto& [world, times] : by_world)
    if (times.first.size() > 1)
      std::printf("world %d: Spearman's rank correlation %.2f over %zu layouts\n", world,
                  spearman(times.first, times.second), times.first.size());
  return errors.size() == layouts.size() ? 0 : 1;
}

}  // namespace tessera::bench
