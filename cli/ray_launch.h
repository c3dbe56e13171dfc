// `tessera train CONFIG --launcher ray`: the job runs on a Ray cluster, one worker per Ray actor. The
// driver is Python (tessera.ray, which needs Ray); this hands it the command line and becomes it.
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

// Replaces this process with `PYTHON -m tessera.ray train ...` (PYTHON: TESSERA_PYTHON, else python3
// on the PATH), the package found beside this program's build tree when it is there. Returns only on
// failure to start it, with the exit code to use.
int exec_ray_driver(const RayLaunch& launch);

}  // namespace tessera::cli
