// tessera devices: the devices this process can use and the CUDA libraries it loaded, with the
// versions it was built against (what scripts/gpu_check.sh prints first on a GPU machine).
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "tessera/backend/cuda/device_info.h"

namespace tessera::cli {

Command add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the CPU and CUDA devices and the CUDA library versions loaded");
  return {cmd, []() -> int {
    std::printf("cpu\n");
    std::printf("cuda backend: %s\n", cuda::compiled() ? "built" : "not built");
    for (const cuda::LibraryVersion& v : cuda::library_versions())
      std::printf("  %-18s %s%s%s\n", v.name.c_str(), v.loaded.c_str(), v.compiled.empty() ? "" : " (built with ",
                  v.compiled.empty() ? "" : (v.compiled + ")").c_str());
    const int count = cuda::device_count();
    if (count == 0) std::printf("no CUDA device: %s\n", cuda::unavailable_reason().c_str());
    for (int i = 0; i < count; ++i) {
      const cuda::DeviceProperties p = cuda::device_properties(i);
      std::printf("cuda:%d  %s, compute capability %d.%d, %d SMs, %.1f GiB (%.1f GiB free)\n", i, p.name.c_str(), p.major,
                  p.minor, p.multiprocessors, static_cast<double>(p.total_memory) / (1 << 30),
                  static_cast<double>(p.free_memory) / (1 << 30));
    }
    return 0;
  }};
}

}  // namespace tessera::cli
