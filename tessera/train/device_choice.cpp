#include "tessera/train/device_choice.h"

#include "tessera/backend/cuda/device_info.h"
#include "tessera/dist/launcher/env.h"

namespace tessera::train {

Device device_for_rank(std::string_view setting, std::optional<int> local_rank, int device_count) {
  const Device asked = parse_device(setting);
  if (asked.is_cpu() || setting != "cuda" || !local_rank || device_count <= 0) return asked;
  return cuda_device(*local_rank % device_count);
}

Device device_for_this_process(std::string_view setting) {
  const Device asked = parse_device(setting);
  if (asked.is_cpu()) return asked;  // no CUDA call on the CPU path
  return device_for_rank(setting, dist::launcher::local_rank_from_environment(), cuda::device_count());
}

}  // namespace tessera::train
