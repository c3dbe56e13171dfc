// Fuzz target: a parameter-server request (parallel/ps/protocol.h) read as the server reads it: the
// opcode, then that request's fields with the same readers and limits (read_spec, read_ids,
// read_floats), then nothing more. The model the server holds is fixed here (two dense pieces of 4
// and 16 floats, one sparse table of 8 rows of 2), standing in for what a registration sets up.
// A malformed request must end in ProtocolError, never a crash, a hang or an allocation its length
// fields merely claim.
#include <cstdint>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/parallel/ps/protocol.h"

namespace {

using namespace tessera::parallel::ps;

constexpr size_t kDensePieces[] = {4, 16};
constexpr int64_t kSparseRows = 8, kSparseRowSize = 2;

size_t dense_piece(FrameReader& r) {
  const uint32_t piece = r.u32();
  if (piece >= std::size(kDensePieces)) throw ProtocolError("no such piece");
  return kDensePieces[piece];
}

std::vector<int64_t> sparse_ids(FrameReader& r) {
  if (r.u32() != 0) throw ProtocolError("no such sparse parameter");
  std::vector<int64_t> ids = read_ids(r);
  for (int64_t id : ids)
    if (id < 0 || id >= kSparseRows) throw ProtocolError("row out of range");
  return ids;
}

void read_request(FrameReader& r) {
  std::vector<float> scratch;
  switch (PsOp(r.u8())) {
    case PsOp::kRegister: {
      r.i64();
      const uint32_t n = r.u32();
      if (n == 0 || n > 1000000) throw ProtocolError("model size");
      for (uint32_t i = 0; i < n; ++i) read_spec(r);
      break;
    }
    case PsOp::kInit: {
      r.u32(), r.i64();
      r.bytes_view();
      break;
    }
    case PsOp::kInitDone:
    case PsOp::kDone: break;
    case PsOp::kRestore:
    case PsOp::kSave: r.str(), r.i64(); break;
    case PsOp::kPush: {
      r.i64(), r.i64();
      const uint32_t n = r.u32();
      for (uint32_t i = 0; i < n; ++i) {
        scratch.resize(dense_piece(r));
        read_floats(r, scratch.data(), scratch.size(), "pushed gradient");
      }
      const uint32_t m = r.u32();
      for (uint32_t i = 0; i < m; ++i) {
        const std::vector<int64_t> ids = sparse_ids(r);
        scratch.resize(ids.size() * kSparseRowSize);
        read_floats(r, scratch.data(), scratch.size(), "pushed row gradients");
      }
      break;
    }
    case PsOp::kPull: {
      r.i64(), r.u8();
      const uint32_t m = r.u32();
      for (uint32_t i = 0; i < m; ++i) sparse_ids(r);
      break;
    }
    default: return;
  }
  r.expect_end();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    FrameReader r(data, size);
    read_request(r);
  } catch (const ProtocolError&) {
  }
  return 0;
}
