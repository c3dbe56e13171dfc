// `tessera plan --search`: every layout of the config's model at the planned world size (DDP, ZeRO
// stages 1-3, HSDP across hosts, and each DP x PP x TP mesh the world divides into), each planned
// (job_plan.h) and its step predicted (cost_model.h), those that fit the memory per rank ranked by
// predicted step time. A layout the model cannot take (a TP that does not divide its heads, a
// pipeline longer than its layers) is listed with the reason the strategy gave.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tessera/plan/cost_model.h"

namespace tessera::plan {

struct Candidate {
  std::string name;                // "zero3", "mesh dp2 x pp2 x tp1"
  // The overrides that make it, as --set takes them (a search's results add the batch it trained).
  std::vector<std::string> sets;
};

std::vector<Candidate> candidate_layouts(const PlanOptions& options);

struct SearchResult {
  Candidate candidate;
  std::string refused;     // why the strategy refused it ("" when planned)
  int64_t peak = 0;        // the largest rank's peak
  bool fits = true;        // peak within the memory per rank
  StepPrediction prediction;
};

// `memory_per_rank`: bytes (0: any). Every layout trains the config's global batch (without
// train.global_batch_size: train.batch_size times the config's own replicas at this world). Results in ranked order: fitting layouts by predicted step,
// then those that do not fit, then the refused. `on_candidate` before each (progress).
std::vector<SearchResult> search_layouts(const train::TrainConfig& config, const PlanOptions& options,
                                         const CostInputs& inputs, int64_t memory_per_rank,
                                         const std::function<void(const Candidate&)>& on_candidate = {});

// The ranked table and the command that trains the best layout.
std::string search_text(const std::vector<SearchResult>& results, int64_t memory_per_rank, const std::string& config_path,
                        const PlanOptions& options);

}  // namespace tessera::plan
