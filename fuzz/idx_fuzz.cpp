// Fuzz target: the IDX reader (data/idx.h), gzip included. Bad input must end in tessera's errors
// (IoError, NotSupportedError), never a crash, a hang or an allocation the header merely claims.
#include <cstdint>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tessera::data::IdxArray a = tessera::data::decode_idx(std::vector<uint8_t>(data, data + size), "fuzz input");
    (void)a;
  } catch (const tessera::Error&) {
  }
  return 0;
}
