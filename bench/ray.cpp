// `tessera bench ray`: tessera and Ray side by side on this machine, one Python run per part, each
// the same job done both ways in the same invocation (bench/ray_train.py, ray_tune.py, ray_serve.py:
// their docstrings give the method). Ray and PyTorch come from the reference venv (scripts/setup.sh
// --bench); this only finds the scripts, the package and this program, and runs them in turn.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sys/wait.h>

#include "bench/bench.h"
#include "bench/test_hosts.h"
#include "tessera/core/error.h"

namespace tessera::bench {

int ray(const RayBenchOptions& o) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string source = TESSERA_SOURCE_DIR;
  int rc = 0;
  for (const std::string& part : split_list(o.parts)) {
    std::string args;
    if (part == "train")
      args = " --models " + quoted(o.models) + " --workers " + std::to_string(o.workers) + " --epochs " +
             std::to_string(o.epochs) + " --repeats " + std::to_string(o.repeats);
    else if (part == "tune")
      args = " --trials " + std::to_string(o.trials) + " --epochs " + std::to_string(o.tune_epochs);
    else if (part == "serve")
      args = " --clients " + quoted(o.clients) + " --seconds " + std::to_string(o.seconds);
    else
      throw ValueError("[bench ray] unknown part '" + part + "': train, tune or serve");
    // PYTHONPATH: the build tree's package (python/CMakeLists.txt); TESSERA_BIN: the workers' program.
    const std::string command = "env PYTHONPATH=" + quoted(std::string(TESSERA_BINARY_DIR) + "/python") +
                                " TESSERA_BIN=" + quoted(self) + " timeout " + std::to_string(o.timeout_s) + " " +
                                quoted(o.python) + " " + quoted(source + "/bench/ray_" + part + ".py") + args;
    std::printf("bench ray %s: %s\n", part.c_str(), command.c_str());
    std::fflush(stdout);
    const int status = std::system(command.c_str());
    if (status != 0) {
      std::fprintf(stderr, "bench ray %s: failed (status %d)\n", part.c_str(),
                   WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      rc = 1;
    }
  }
  return rc;
}

}  // namespace tessera::bench
