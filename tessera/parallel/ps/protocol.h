// The parameter-server wire protocol, on FramedServer's frames (dist/net/framed_server.h). Requests
// from a worker to a server, with their fields (a float array is a byte string of little-endian
// float32, an id array one of int64):
//
//   kRegister  i64 start clock, u32 n, n x (name, i64 rows, i64 row_size, u8 sparse) -> kOk | kError
//              the model; every worker registers, and a worker whose model differs is refused
//   kInit      u32 piece, i64 first row within the piece, floats     -> kOk
//   kInitDone                                                        -> kOk  (the shard may now be read)
//   kRestore   str checkpoint dir, i64 step                          -> kOk | kError  (instead of kInit)
//   kPush      i64 clock, i64 lr bits (f64), u32 n, n x (u32 piece, floats),
//              u32 m, m x (u32 param, ids, floats)                   -> kOk | kError
//   kPull      i64 clock, u8 with dense, u32 m, m x (u32 param, ids) -> kValues | kError
//              answered when the mode allows (synchronous: after update `clock`; bounded
//              staleness: when the slowest worker is within `staleness` steps)
//   kSave      str checkpoint dir, i64 step                          -> kOk | kError
//   kDone                                                            -> kOk
//
// On one machine the dense values go through shared memory instead (shm_channel.h):
//   kAttachShm str segment name, i64 bytes, 16-byte nonce, u32 k, k x (u32 piece, i64 offset, i64 floats)
//              the server's dense pieces in its order, each with where it starts in the
//              segment's dense layout (ShardPlan::piece_offset)      -> kAttached
//   kPushShm   as kPush, with u32 n = 0: the dense gradients are in the push region -> kOk | kError
//   kPullShm   as kPull, with dense: the dense values go to the pull region -> kValuesInShm | kError
//
//   kValues    i64 version, u32 n, n x (u32 piece, floats), u32 m, m x floats  (n = 0 without dense)
//   kAttached  u8 attached, str why not
//   kValuesInShm  i64 version, u32 m, m x floats (the dense values are in the pull region)
//
// A worker's clock is the number of gradients it has pushed; a server's version the number of
// updates it has applied. Dense pulls return every dense piece the server holds; sparse ones the
// requested rows, which must be the server's own (the worker routes them by the shard plan).
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tessera/dist/net/frame.h"
#include "tessera/parallel/ps/shard_plan.h"

namespace tessera::parallel::ps {

using dist::Bytes;
using dist::Milliseconds;

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian float32/int64");

constexpr uint32_t kPsProtocolVersion = 3;

enum class PsOp : uint8_t { kRegister = 2, kInit, kInitDone, kRestore, kPush, kPull, kSave, kDone, kAttachShm, kPushShm, kPullShm };
enum class PsReply : uint8_t { kOk = 0x80, kValues = 0x81, kAttached = 0x82, kValuesInShm = 0x83, kError = 0x85 };

const char* op_name(PsOp op);

using dist::detail::FrameReader;
using dist::detail::FrameWriter;
using dist::detail::ProtocolError;

inline FrameWriter& write_floats(FrameWriter& w, const float* data, size_t n) {
  return w.bytes(reinterpret_cast<const uint8_t*>(data), n * sizeof(float));
}
inline FrameWriter& write_ids(FrameWriter& w, const std::vector<int64_t>& ids) {
  return w.bytes(reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * sizeof(int64_t));
}

// Copies a float array of the frame (at whatever alignment the sender left it) into `dst`, after
// checking it holds `expected` elements (ProtocolError naming `what` otherwise).
void read_floats(FrameReader& r, float* dst, size_t expected, const char* what);
// Unaligned in the frame, so copied out.
std::vector<int64_t> read_ids(FrameReader& r);
// One parameter of a kRegister: ProtocolError for an impossible shape.
ParamSpec read_spec(FrameReader& r);

inline int64_t double_bits(double v) { return std::bit_cast<int64_t>(v); }
inline double bits_double(int64_t v) { return std::bit_cast<double>(v); }

}  // namespace tessera::parallel::ps
