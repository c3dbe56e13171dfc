// Which device a training process uses (train.device, --device). "cpu" and "cuda:N" mean what they
// say; plain "cuda" gives each process of a machine its own GPU, as torchrun users write
// torch.cuda.set_device(LOCAL_RANK): local rank r takes cuda:(r mod the GPUs it sees), so ranks
// share GPUs round-robin where they outnumber them (every rank on cuda:0 on a one-GPU machine).
#pragma once
#include <optional>
#include <string_view>

#include "tessera/core/device.h"

namespace tessera::train {

Device device_for_rank(std::string_view setting, std::optional<int> local_rank, int device_count);

// The same for this process: its local rank from the launcher's environment, the GPUs it sees.
Device device_for_this_process(std::string_view setting);

}  // namespace tessera::train
