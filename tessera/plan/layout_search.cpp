#include "tessera/plan/layout_search.h"

#include <algorithm>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/train/config.h"

namespace tessera::plan {

namespace {

using tessera::detail::concat;

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

}  // namespace

std::vector<Candidate> candidate_layouts(const PlanOptions& options) {
  const int n = options.world;
  std::vector<Candidate> out;
  out.push_back({"ddp", {"distributed.strategy=ddp"}});
  if (n > 1)
    for (int stage : {1, 2, 3})
      out.push_back({concat("zero", stage), {"distributed.strategy=zero", concat("distributed.zero_stage=", stage)}});
  if (options.hosts > 1 && n / options.hosts > 1)
    out.push_back({"hsdp", {"distributed.strategy=hsdp", "distributed.zero_stage=3",
                            concat("distributed.hsdp_shard_size=", n / options.hosts)}});
  for (int pp : divisors(n))
    for (int tp : divisors(n / pp)) {
      if (pp == 1 && tp == 1) continue;  // plain data parallelism: ddp above
      const int dp = n / (pp * tp);
      out.push_back({concat("mesh dp", dp, " x pp", pp, " x tp", tp),
                     {"distributed.strategy=mesh", concat("parallel.dp=", dp), concat("parallel.pp=", pp),
                      concat("parallel.tp=", tp)}});
    }
  return out;
}

std::vector<SearchResult> search_layouts(const train::TrainConfig& config, const PlanOptions& options,
                                         const CostInputs& inputs, int64_t memory_per_rank,
                                         const std::function<void(const Candidate&)>& on_candidate) {
  std::vector<SearchResult> results;
  // Every layout trains the config's global batch: train.global_batch_size, else train.batch_size
  // times the config's own replicas at this world (its dp for a mesh, every rank otherwise).
  int64_t global = config.train.global_batch_size;
  if (global == 0) {
    const bool mesh = config.distributed.strategy == "mesh" || train::uses_model_parallelism(config);
    const int64_t replicas = mesh ? options.world / (config.parallel.pp * config.parallel.tp * config.parallel.cp)
                                  : options.world;
    global = config.train.batch_size * std::max<int64_t>(1, replicas);
  }
  for (const Candidate& c : candidate_layouts(options)) {
    if (on_candidate) on_candidate(c);
    SearchResult r;
    r.candidate = c;
    try {
      // The candidates are DP, ZeRO, HSDP and DP x PP x TP: nothing of the config's own layout stays.
      train::TrainConfig layout = config;
      layout.parallel.dp = 0;
      layout.parallel.pp = layout.parallel.tp = layout.parallel.cp = layout.parallel.ep = 1;
      layout.distributed.local_sgd = 0;
      // A mesh's replicas each take train.batch_size (it has no global_batch_size); the rest share one.
      const bool mesh = std::find(c.sets.begin(), c.sets.end(), "distributed.strategy=mesh") != c.sets.end();
      for (const std::string& s : c.sets) train::apply_override(layout, s);
      const int64_t replicas = mesh ? layout.parallel.dp : options.world;
      TESSERA_CHECK(global % replicas == 0, "[plan] ", replicas, " replicas cannot share the global batch of ", global);
      r.candidate.sets.push_back(concat("train.batch_size=", global / replicas));
      r.candidate.sets.push_back(concat("train.global_batch_size=", mesh ? 0 : global));
      r.candidate.sets.push_back("parallel.cp=1");
      for (size_t k = c.sets.size(); k < r.candidate.sets.size(); ++k) train::apply_override(layout, r.candidate.sets[k]);
      const JobPlan job = make_plan(layout, options, "");
      for (const RankPlan& rank : job.ranks) r.peak = std::max(r.peak, rank.memory.peak);
      r.fits = memory_per_rank <= 0 || r.peak <= memory_per_rank;
      r.prediction = predict_step(job, layout, inputs);
    } catch (const Error& e) {  // a layout the model cannot take (or whose dry run fails): said, not fatal
      r.refused = e.what();
    }
    results.push_back(std::move(r));
  }
  auto order = [](const SearchResult& r) { return !r.refused.empty() ? 2 : r.fits ? 0 : 1; };
  std::stable_sort(results.begin(), results.end(), [&](const SearchResult& a, const SearchResult& b) {
    if (order(a) != order(b)) return order(a) < order(b);
    return order(a) < 2 && a.prediction.step_s < b.prediction.step_s;
  });
  return results;
}

std::string search_text(const std::vector<SearchResult>& results, int64_t memory_per_rank, const std::string& config_path,
                        const PlanOptions& options) {
  std::string out = "\nlayouts, fastest first";
  if (memory_per_rank > 0) out += concat(" (fitting in ", memory_per_rank / (1024 * 1024), " MiB per rank)");
  out += ":\n";
  char line[512];
  int place = 0;
  for (const SearchResult& r : results) {
    if (!r.refused.empty()) {
      std::snprintf(line, sizeof line, "   -  %-26s refused: %.300s\n", r.candidate.name.c_str(), r.refused.c_str());
    } else {
      std::snprintf(line, sizeof line, "  %2s  %-26s %10.2f ms a step, peak %8.2f MiB a rank%s\n",
                    r.fits ? std::to_string(++place).c_str() : "-", r.candidate.name.c_str(),
                    r.prediction.step_s * 1e3, static_cast<double>(r.peak) / (1024.0 * 1024.0),
                    r.fits ? "" : "  (does not fit)");
    }
    out += line;
  }
  for (const SearchResult& r : results)
    if (r.refused.empty() && r.fits) {
      std::string sets;
      for (const std::string& s : r.candidate.sets) sets += " --set " + s;
      out += options.hosts == 1
                 ? concat("best: tessera train ", config_path, " --nproc ", options.world, sets, "\n")
                 : concat("best, on each of the ", options.hosts, " hosts: tessera run --nnodes ", options.hosts,
                          " --nproc-per-node ", options.world / options.hosts, " ... -- tessera train ", config_path,
                          sets, "\n");
      break;
    }
  return out;
}

}  // namespace tessera::plan
