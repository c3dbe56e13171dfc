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
    case PsOp::kAttachShm: return "attach-shm";
    case PsOp::kPushShm: return "push-shm";
    case PsOp::kPullShm: return "pull-shm";
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
  if (n) std::memcpy(ids.data(), data, n);  // an empty vector's data() may be null (fuzz/ps_request_fuzz.cpp found it)
  return ids;
}

ParamSpec read_spec(FrameReader& r) {
  ParamSpec s;
  s.name = r.str();
  s.rows = r.i64();
  s.row_size = r.i64();
  s.sparse = r.u8() != 0;
  if (s.rows < 1 || s.row_size < 1 || s.rows > (int64_t(1) << 40) || s.row_size > (int64_t(1) << 30))
    throw ProtocolError(tessera::detail::concat("parameter '", s.name, "' has an impossible shape ", s.rows, "x",
                                                s.row_size));
  return s;
}

}  // namespace tessera::parallel::ps
