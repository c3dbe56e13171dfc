// Fuzz target: what the etcd rendezvous reads from the network (elastic/etcd_reply.h): an HTTP reply
// of any bytes ends in JSON or an IoError, and the fields taken from that JSON in a value or an
// IoError, never another exception, a read out of bounds or a loop without end.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/elastic/etcd_reply.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    nlohmann::json reply = elastic::parse_etcd_reply(bytes, "/v3/kv/range");
    if (auto value = elastic::first_value(reply, "/v3/kv/range")) elastic::parse_counter(*value, "fuzz");
  } catch (const IoError&) {
  }
  // base64 round trip of arbitrary bytes.
  if (elastic::base64_decode(elastic::base64_encode(bytes)) != bytes) std::abort();
  return 0;
}
