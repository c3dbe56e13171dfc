#include "tessera/parallel/zero/parameter_layout.h"

#include "tessera/parallel/zero/replicated_parameters.h"
#include "tessera/parallel/zero/sharded_parameters.h"
#include "tessera/parallel/zero/zero_data_parallel.h"

namespace tessera::parallel::zero {

std::shared_ptr<ParameterLayout> make_parameter_layout(ZeroUnits& units, const ZeroOptions& options) {
  if (options.stage == 3) return std::make_shared<ShardedParameters>(units, options);
  return std::make_shared<ReplicatedParameters>(units, options.bucket_cap_bytes);
}

}  // namespace tessera::parallel::zero
