// Fuzz target: what a Slurm task reads from its environment (dist/launcher/slurm_env.h). The input's
// first line is a compressed host list, its second a tasks-per-node list, and every further line a
// NAME=VALUE variable of a step: each ends in a value or a ValueError, never another exception, a
// read out of bounds, an allocation past the 65536-host bound or a loop without end.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/slurm_env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::dist::launcher;
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  std::string hosts, tasks;
  std::getline(lines, hosts);
  std::getline(lines, tasks);
  try {
    if (expand_host_list(hosts).size() > 65536) std::abort();
  } catch (const ValueError&) {
  }
  try {
    if (expand_tasks_per_node(tasks).size() > 65536) std::abort();
  } catch (const ValueError&) {
  }
  std::map<std::string, std::string> variables;
  for (std::string line; std::getline(lines, line);)
    if (const size_t eq = line.find('='); eq != std::string::npos) variables[line.substr(0, eq)] = line.substr(eq + 1);
  try {
    if (auto step = slurm_step_from_variables(variables)) {
      if (step->rank < 0 || step->rank >= step->ntasks || step->local_rank >= step->local_tasks ||
          static_cast<int>(step->nodes.size()) != step->nnodes)
        std::abort();
      WorkerEnv env = worker_env_from_slurm(*step, variables);
      if (worker_env_from_variables(to_variables(env)) != env) std::abort();
      launcher_place_from_slurm(*step, variables);
    }
  } catch (const ValueError&) {
  }
  return 0;
}
