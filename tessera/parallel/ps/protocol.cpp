#include "tessera/parallel/ps/protocol.h"

#include "tessera/core/error.h"

namespace tessera::parallel::ps {

const char* op_name(PsOp op) {
  switch (op) {
    case PsOp::kRegister: return "register";
    case PsOp::kInit: return "init";
    case PsOp::kInitDone: return "init-done";
    case PsOp::kRestore: return "restore";
    case PsOp::kPush: return "push";
    case PsOp::kPull: return "pull";
    case PsOp::kSave: return "save";
    case PsOp::kDone: return "done";
  }
  return "unknown";
}

void read_floats(FrameReader& r, float* dst, size_t expected, const char* what) {
  auto [data, n] = r.bytes_view();
  if (n != expected * sizeof(float))
    throw ProtocolError(tessera::detail::concat(what, ": ", n, " bytes, expected ", expected, " float32 values"));
  if (n) std::memcpy(dst, data, n);
}

std::vector<int64_t> read_ids(FrameReader& r) {
  auto [data, n] = r.bytes_view();
  if (n % sizeof(int64_t) != 0)
    throw ProtocolError(tessera::detail::concat("an id array of ", n, " bytes, not a multiple of 8"));
  std::vector<int64_t> ids(n / sizeof(int64_t));
  std::memcpy(ids.data(), data, n);
  return ids;
}

}  // namespace tessera::parallel::ps
