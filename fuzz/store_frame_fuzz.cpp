// Fuzz target: the frame fields of the store's protocol (dist/store/tcp_store_protocol.h), read as
// the server reads a request: an opcode, then that request's fields, then nothing more. A malformed
// frame must end in ProtocolError, never a crash or an allocation its length fields merely claim.
#include <cstdint>

#include "tessera/core/error.h"
#include "tessera/dist/store/tcp_store_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::dist::detail;
  try {
    FrameReader r(data, size);
    switch (StoreOp(r.u8())) {
      case StoreOp::kHello: r.u32(), r.i64(), r.str(); break;
      case StoreOp::kSet: r.str(), r.bytes(); break;
      case StoreOp::kGet: r.str(), r.i64(); break;
      case StoreOp::kAdd: r.str(), r.i64(); break;
      case StoreOp::kCompareSet: r.str(), r.bytes(), r.bytes(); break;
      case StoreOp::kDeleteKey: r.str(); break;
      case StoreOp::kCheck: r.keys(); break;
      case StoreOp::kWait: r.keys(), r.i64(); break;
      default: return 0;
    }
    r.expect_end();
  } catch (const ProtocolError&) {
  }
  return 0;
}
