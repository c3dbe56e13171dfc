#include "cli/ray_launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "tessera/util/settings.h"

namespace tessera::cli {

namespace fs = std::filesystem;

std::vector<std::string> ray_train_arguments(const RayLaunch& launch) {
  std::vector<std::string> args = {"train", launch.config_path,
                                   "--num-workers", std::to_string(launch.num_workers),
                                   "--placement", launch.placement,
                                   "--max-failures", std::to_string(launch.max_failures)};
  if (!launch.address.empty()) args.insert(args.end(), {"--address", launch.address});
  for (const auto& s : launch.overrides) args.insert(args.end(), {"--set", s});
  for (const auto& r : launch.resources) args.insert(args.end(), {"--resources", r});
  if (launch.resume) args.push_back("--resume");
  return args;
}

int exec_ray_driver(std::vector<std::string> arguments) {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const char* python_setting = env_setting("TESSERA_PYTHON");
  const std::string python = python_setting != nullptr && *python_setting != '\0' ? python_setting : "python3";
  // The build tree keeps the package in build/python (python/CMakeLists.txt); an installed tessera
  // has it in site-packages already.
  const fs::path build_package = self.parent_path() / "python";
  if (fs::exists(build_package / "tessera" / "ray" / "__init__.py")) {
    const char* old = std::getenv("PYTHONPATH");
    std::string path = build_package.string();
    if (old != nullptr && *old != '\0') path += std::string(":") + old;
    ::setenv("PYTHONPATH", path.c_str(), 1);
  }
  std::vector<std::string> args = {python, "-m", "tessera.ray"};
  args.insert(args.end(), arguments.begin(), arguments.end());
  args.insert(args.end(), {"--tessera-bin", self.string()});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr,
               "tessera: cannot run %s (%s) for the Ray driver: install Python with Ray (pip install ray), or set "
               "TESSERA_PYTHON to the Python that has it\n",
               python.c_str(), std::strerror(errno));
  return 127;
}

}  // namespace tessera::cli
