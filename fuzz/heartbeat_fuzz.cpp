// Fuzz target: the heartbeat parser (dist/heartbeat.h), which reads what worker processes wrote to
// the store. Whatever the bytes, it returns a heartbeat or nullopt; one it accepts formats and
// parses back to itself.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tessera/dist/heartbeat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::dist;
  std::optional<Heartbeat> beat = parse_heartbeat(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!beat) return 0;
  std::optional<Heartbeat> again = parse_heartbeat(format_heartbeat(*beat));
  if (!again || again->count != beat->count || again->sequence != beat->sequence || again->in_flight != beat->in_flight ||
      again->arrivals != beat->arrivals)
    std::abort();  // an accepted heartbeat must survive the round trip
  return 0;
}
