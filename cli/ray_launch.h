// `tessera train CONFIG --launcher ray` (the job on a Ray cluster, one worker per Ray actor) and
// `tessera tune ... --backend ray` (the trials as Ray Tune trials). The driver is Python (tessera.ray,
// which needs Ray); this hands it the command line and becomes it.
#pragma once
#include <string>
#include <vector>

namespace tessera::cli {

struct RayLaunch {
  std::string config_path;
  std::vector<std::string> overrides;  // --set KEY=VALUE, as given
  int num_workers = 1;
  std::string address;                 // "": RAY_ADDRESS, else a local Ray
  std::vector<std::string> resources;  // NAME=AMOUNT per worker
  std::string placement = "PACK";
  int max_failures = 3;
  bool resume = false;
};

// `tessera.ray train ...`'s arguments for a launch.
std::vector<std::string> ray_train_arguments(const RayLaunch& launch);

// Replaces this process with `PYTHON -m tessera.ray ARGUMENTS... --tessera-bin THIS_PROGRAM` (PYTHON:
// TESSERA_PYTHON, else python3 on the PATH), the package found beside this program's build tree when
// it is there. Returns only on failure to start it, with the exit code to use.
int exec_ray_driver(std::vector<std::string> arguments);

}  // namespace tessera::cli
