#include "tessera/dist/net/frame.h"

#include <cstring>
#include <limits>

namespace tessera::dist::detail {

uint32_t read_u32_le(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

FrameWriter::FrameWriter(uint8_t opcode) {
  buf_.resize(kFrameHeaderBytes);  // length, patched by finish()
  buf_.push_back(opcode);
}

FrameWriter::FrameWriter(uint8_t opcode, Bytes recycled) : buf_(std::move(recycled)) {
  buf_.clear();
  buf_.resize(kFrameHeaderBytes);
  buf_.push_back(opcode);
}

FrameWriter& FrameWriter::u8(uint8_t v) {
  buf_.push_back(v);
  return *this;
}

FrameWriter& FrameWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(uint8_t(v >> (8 * i)));
  return *this;
}

FrameWriter& FrameWriter::i64(int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(uint8_t(u >> (8 * i)));
  return *this;
}

FrameWriter& FrameWriter::bytes(const uint8_t* data, size_t n) {
  TESSERA_CHECK(n <= std::numeric_limits<uint32_t>::max(), "[TcpStore] a field of ", n,
                " bytes does not fit the store protocol (at most 4 GiB)");
  u32(static_cast<uint32_t>(n));
  buf_.insert(buf_.end(), data, data + n);
  return *this;
}

FrameWriter& FrameWriter::keys(const std::vector<std::string>& keys) {
  TESSERA_CHECK(keys.size() <= std::numeric_limits<uint32_t>::max(), "[TcpStore] too many keys: ", keys.size());
  u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) str(k);
  return *this;
}

Bytes FrameWriter::finish() {
  size_t n = buf_.size() - kFrameHeaderBytes;
  TESSERA_CHECK(n <= std::numeric_limits<uint32_t>::max(), "[TcpStore] a message of ", n,
                " bytes does not fit the store protocol (at most 4 GiB)");
  for (int i = 0; i < 4; ++i) buf_[i] = uint8_t(n >> (8 * i));
  return std::move(buf_);
}

std::pair<const uint8_t*, size_t> FrameReader::bytes_view() {
  uint32_t n = u32();
  return {take(n, "a byte string"), n};
}

const uint8_t* FrameReader::take(size_t n, const char* what) {
  if (n > left_)
    throw ProtocolError(tessera::detail::concat(what, " of ", n, " bytes exceeds the ", left_,
                                                " bytes left in the frame"));
  const uint8_t* p = p_;
  p_ += n;
  left_ -= n;
  return p;
}

uint8_t FrameReader::u8() { return *take(1, "u8 field"); }

uint32_t FrameReader::u32() { return read_u32_le(take(4, "u32 field")); }

int64_t FrameReader::i64() {
  const uint8_t* p = take(8, "i64 field");
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= uint64_t(p[i]) << (8 * i);
  return static_cast<int64_t>(u);
}

Bytes FrameReader::bytes() {
  uint32_t n = u32();
  const uint8_t* p = take(n, "byte string");
  return Bytes(p, p + n);
}

std::string FrameReader::str() {
  uint32_t n = u32();
  const uint8_t* p = take(n, "string");
  return std::string(reinterpret_cast<const char*>(p), n);
}

std::vector<std::string> FrameReader::keys() {
  uint32_t count = u32();
  // Each key takes at least its 4-byte length, which bounds the reserve by the frame's size.
  if (count > left_ / 4)
    throw ProtocolError(tessera::detail::concat("key count ", count, " cannot fit in the ", left_,
                                                " bytes left in the frame"));
  std::vector<std::string> keys;
  keys.reserve(count);
  for (uint32_t i = 0; i < count; ++i) keys.push_back(str());
  return keys;
}

void FrameReader::expect_end() const {
  if (left_ != 0)
    throw ProtocolError(tessera::detail::concat(left_, " unexpected bytes after the last field"));
}

}  // namespace tessera::dist::detail
