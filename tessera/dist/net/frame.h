// Frames: the unit of every message over tessera's TCP transport (net/framed_client.h,
// net/framed_server.h), which the rendezvous store, the parameter servers and etcd's bridge share:
//
//   u32 length (little-endian, of what follows) | u8 opcode | fields
//
// where a field is an i64 (8 bytes LE), a u8, a u32, or a byte string (u32 LE length, then the
// bytes), and a key list is a u32 count followed by that many byte strings. Each protocol names its
// own opcodes (store/tcp_store_protocol.h, parallel/ps/protocol.h).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/bytes.h"

namespace tessera::dist::detail {

constexpr size_t kFrameHeaderBytes = 4;

// A frame that does not parse. The server drops the connection that sent it; the client reports
// the store as failed.
class ProtocolError : public Error {
  using Error::Error;
};

uint32_t read_u32_le(const uint8_t* p);

class FrameWriter {
 public:
  explicit FrameWriter(uint8_t opcode);
  // Writes into `recycled`'s memory (its contents are dropped): a sender of megabyte frames every
  // step hands back the last frame and allocates (and page-faults) nothing.
  FrameWriter(uint8_t opcode, Bytes recycled);
  FrameWriter& u8(uint8_t v);
  FrameWriter& u32(uint32_t v);
  FrameWriter& i64(int64_t v);
  FrameWriter& bytes(const uint8_t* data, size_t n);
  FrameWriter& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }
  FrameWriter& str(const std::string& s) { return bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  FrameWriter& keys(const std::vector<std::string>& keys);
  // The frame with its length prefix filled in.
  Bytes finish();

 private:
  Bytes buf_;
};

// Reads the fields of one frame (the bytes after the length prefix). Every length is checked
// against the bytes left in the frame before anything is allocated, so a hostile length can
// neither read past the frame nor reserve more memory than the frame (itself capped by
// max_message_bytes) holds.
class FrameReader {
 public:
  FrameReader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  Bytes bytes();
  // A byte string without copying it: valid while the frame's buffer is (parameter-server payloads
  // are megabytes, read once).
  std::pair<const uint8_t*, size_t> bytes_view();
  std::string str();
  std::vector<std::string> keys();
  // ProtocolError if bytes remain: a frame longer than its fields is malformed too.
  void expect_end() const;

 private:
  const uint8_t* take(size_t n, const char* what);
  const uint8_t* p_;
  size_t left_;
};

}  // namespace tessera::dist::detail
