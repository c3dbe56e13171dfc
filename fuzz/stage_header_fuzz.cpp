// Fuzz target: the header between pipeline stages (parallel/pipeline/stage_header.h), read from
// another process. Whatever its 80 bytes, it is refused with a ValueError or announces a tensor of
// at most kStageMessageMaxBytes, which encodes back to the same header.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/parallel/pipeline/stage_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::parallel::pipeline;
  StageHeader header{};
  if (size < sizeof header) return 0;
  std::memcpy(header.data(), data, sizeof header);
  StageTensorSpec spec;
  try {
    spec = decode_stage_header(header, "fuzz");
  } catch (const tessera::ValueError&) {
    return 0;
  }
  // The announced size, exactly: empty if any size is 0, else a product checked step by step.
  bool empty = false;
  for (int64_t d : spec.shape) empty = empty || d == 0;
  if (!empty) {
    __int128 bytes = tessera::dtype_size(spec.dtype);
    for (int64_t d : spec.shape) {
      bytes *= d;
      if (bytes > kStageMessageMaxBytes) std::abort();  // announced past the bound
    }
  }
  if (encode_stage_header(spec.shape, spec.dtype) != header) std::abort();  // not what was sent
  return 0;
}
