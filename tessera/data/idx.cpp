#include "tessera/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>

#include "tessera/core/error.h"

namespace tessera::data {

namespace {

// Bounds the element count before anything is allocated, so a corrupt or hostile header (or a gzip
// bomb) fails with a message instead of exhausting memory. 2^31 bytes is 36x the Fashion-MNIST
// training images.
constexpr int64_t kMaxElements = int64_t{1} << 31;
constexpr size_t kMaxHeaderBytes = 4 + 4 * 255;

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string out;
  char buf[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, i ? " %02x" : "%02x", p[i]);
    out += buf;
  }
  return out;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw IoError(detail::concat("[idx] cannot open ", path, ": ", std::strerror(errno)));
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) bytes.insert(bytes.end(), buf, buf + n);
  if (std::ferror(f.get())) throw IoError(detail::concat("[idx] error reading ", path, ": ", std::strerror(errno)));
  return bytes;
}

// The bytes an IDX file of this header holds (header and data), 0 while the header is incomplete or
// not one: what decode_idx will insist on, known as soon as the header is in.
uint64_t declared_bytes(const std::vector<uint8_t>& bytes) {
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0 || bytes[3] == 0) return 0;
  const size_t header = 4 + 4 * size_t{bytes[3]};
  if (bytes.size() < header) return 0;
  uint64_t numel = 1;
  for (size_t i = 0; i < bytes[3]; ++i) {
    const uint8_t* p = bytes.data() + 4 + 4 * i;
    numel *= (uint64_t{p[0]} << 24) | (uint64_t{p[1]} << 16) | (uint64_t{p[2]} << 8) | p[3];
    if (numel > uint64_t{kMaxElements}) return 0;  // decode_idx reports it
  }
  return header + numel;
}

// Inflates every gzip member (`cat a.gz b.gz` is a valid gzip file); anything after the last member
// that is not another member is an error, as is a stream that ends early.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  if (in.size() > UINT_MAX) throw IoError(detail::concat("[idx] ", path, " is too large (", in.size(), " bytes)"));
  std::vector<uint8_t> out;
  if (in.size() >= 18) {  // the trailer's ISIZE (uncompressed size mod 2^32) sizes the buffer once
    const uint8_t* t = in.data() + in.size() - 4;
    uint64_t isize = t[0] | (t[1] << 8) | (t[2] << 16) | (uint64_t{t[3]} << 24);
    // Only as much as the input could inflate to (deflate's best ratio is about 1032:1): a
    // 26-byte file claiming 2.6 GB must not get them (found by fuzz/idx_fuzz.cpp).
    out.reserve(std::min<uint64_t>({isize, uint64_t{in.size()} * 1032, kMaxElements + kMaxHeaderBytes}));
  }
  uint64_t declared = 0;  // header + data bytes, once the header is in
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw IoError("[idx] zlib failed to initialise");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, &inflateEnd);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  std::vector<uint8_t> chunk(1 << 18);
  while (true) {
    zs.next_out = chunk.data();
    zs.avail_out = static_cast<uInt>(chunk.size());
    int ret = inflate(&zs, Z_NO_FLUSH);
    out.insert(out.end(), chunk.data(), chunk.data() + (chunk.size() - zs.avail_out));
    if (out.size() > kMaxElements + kMaxHeaderBytes)
      throw IoError(detail::concat("[idx] ", path, " decompresses to more than 2^31 bytes, the size limit"));
    if (declared == 0) declared = declared_bytes(out);
    if (declared > 0 && out.size() > declared)  // stop inflating a stream longer than its header says
      throw IoError(detail::concat("[idx] ", path, " decompresses to more than the ", declared,
                                   " bytes its IDX header declares"));
    if (ret == Z_OK) continue;
    if (ret == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      if (zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      throw IoError(detail::concat("[idx] ", path, " has ", zs.avail_in, " trailing bytes after its gzip stream"));
    }
    if (ret == Z_BUF_ERROR)  // no progress possible: the input ended inside the stream
      throw IoError(detail::concat("[idx] ", path, " is a truncated gzip stream (it ends after ", in.size(),
                                   " compressed bytes); download it again"));
    throw IoError(detail::concat("[idx] ", path, " is a corrupt gzip stream: ", zs.msg ? zs.msg : "unknown zlib error",
                                 " (code ", ret, ")"));
  }
  return out;
}

const char* idx_type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return nullptr;
  }
}

}  // namespace

IdxArray read_idx(const std::string& path) { return decode_idx(read_file(path), path); }

IdxArray decode_idx(std::vector<uint8_t> bytes, const std::string& path) {
  const bool gzipped = bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
  if (gzipped) bytes = gunzip(bytes, path);
  const char* what = gzipped ? " (after gunzip)" : "";

  if (bytes.size() < 4)
    throw IoError(detail::concat("[idx] ", path, " is not an IDX file: it has ", bytes.size(), " bytes", what,
                                 ", fewer than the 4-byte magic"));
  if (bytes[0] != 0 || bytes[1] != 0 || !idx_type_name(bytes[2]))
    throw IoError(detail::concat("[idx] ", path, " is not an IDX file: its magic is ", hex_bytes(bytes.data(), 4), what,
                                 " where IDX files start with 00 00 <type 08..0e> <ndim>"));
  if (bytes[2] != 0x08) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02x", bytes[2]);
    throw NotSupportedError(detail::concat("[idx] ", path, " holds elements of type ", type, " (", idx_type_name(bytes[2]),
                                           "); only unsigned bytes (0x08) are supported"));
  }
  const size_t ndim = bytes[3];
  if (ndim == 0) throw IoError(detail::concat("[idx] ", path, " is not an IDX file: it declares 0 dimensions"));
  const size_t header = 4 + 4 * ndim;
  if (bytes.size() < header)
    throw IoError(detail::concat("[idx] ", path, " is truncated: its header of ", ndim, " dims needs ", header,
                                 " bytes, the file has ", bytes.size(), what));

  IdxArray out;
  int64_t numel = 1;
  for (size_t i = 0; i < ndim; ++i) {
    const uint8_t* p = bytes.data() + 4 + 4 * i;
    int64_t d = (int64_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];  // big-endian uint32
    out.shape.push_back(d);
    numel *= d;  // cannot overflow: numel <= 2^31 (checked below) and d < 2^32
    if (numel > kMaxElements)
      throw IoError(detail::concat("[idx] ", path, " declares more than 2^31 elements (dims so far ",
                                   shape_str(out.shape), "); the header is corrupt or the file is too large"));
  }
  const size_t expected = static_cast<size_t>(numel), got = bytes.size() - header;
  if (got < expected)
    throw IoError(detail::concat("[idx] ", path, " is truncated: shape ", shape_str(out.shape), " expects ", expected,
                                 " data bytes, got ", got, what));
  if (got > expected)
    throw IoError(detail::concat("[idx] ", path, " has ", got - expected, " trailing bytes after its ", expected,
                                 " data bytes (shape ", shape_str(out.shape), ")", what));
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));  // a memmove, no second buffer
  out.data = std::move(bytes);
  return out;
}

}  // namespace tessera::data
