// The TCP store's wire format. Every message is a frame (net/frame.h):
//
//   u32 length (little-endian, of what follows) | u8 opcode | fields
//
// where a field is an i64 (8 bytes LE), a u8, or a byte string (u32 LE length, then the bytes),
// and a key list is a u32 count followed by that many byte strings. Requests and their fields:
//
//   kHello      u32 protocol version, i64 rank, token      (first message of every connection)
//   kSet        key, value                   -> kOk
//   kGet        key, i64 timeout ms          -> kValue value | kTimeout missing keys
//   kAdd        key, i64 delta               -> kInt new value | kError message
//   kCompareSet key, expected, desired       -> kValue value after
//   kDeleteKey  key                          -> kBool existed
//   kCheck      keys                         -> kBool all present
//   kWait       keys, i64 timeout ms         -> kOk | kTimeout missing keys
//
// A wrong token or version gets kRejected (u8 reason) and the connection is closed. Blocking
// requests carry their timeout so the server itself answers kTimeout with the keys still missing,
// and the connection stays in step for the next request.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/dist/net/frame.h"
#include "tessera/dist/store/store.h"

namespace tessera::dist::detail {

constexpr uint32_t kStoreProtocolVersion = 1;

enum class StoreOp : uint8_t { kHello = 1, kSet, kGet, kAdd, kCompareSet, kDeleteKey, kCheck, kWait };
enum class StoreReply : uint8_t { kOk = 0x80, kValue, kInt, kBool, kTimeout, kError, kRejected };
// A rejected hello is answered kRejected | u8 reason | str why (net/framed_server.h sends it).
enum class RejectReason : uint8_t { kToken = 1, kVersion = 2 };

}  // namespace tessera::dist::detail
