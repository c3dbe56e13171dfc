// A run's per-step metrics (<output_dir>/metrics.jsonl, "type": "step"), for the tests that compare
// what runs report.
#pragma once
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::testing {

// Every step record of the run written to `out`, in order.
inline std::vector<nlohmann::json> step_records(const std::string& out) {
  std::ifstream metrics(out + "/metrics.jsonl");
  std::vector<nlohmann::json> steps;
  for (std::string line; std::getline(metrics, line);)
    if (auto record = nlohmann::json::parse(line); record.value("type", "") == "step") steps.push_back(record);
  return steps;
}

// The last step record (null where there is none).
inline nlohmann::json last_step(const std::string& out) {
  const std::vector<nlohmann::json> steps = step_records(out);
  return steps.empty() ? nlohmann::json() : steps.back();
}

}  // namespace tessera::testing
