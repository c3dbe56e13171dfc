// IDX reader: plain and gzipped files written here, and every malformed case with its message.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/data/idx.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::data;
using tessera::testing::expect_error;

namespace {

using Bytes = std::vector<uint8_t>;

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("tessera_idx_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string write_file(const std::string& name, const Bytes& bytes) {
  std::string path = temp_path(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);  // data() of an empty vector is null
  std::fclose(f);
  return path;
}

Bytes gzip(const Bytes& raw) {
  std::string path = temp_path("gzip_scratch.gz");
  gzFile g = gzopen(path.c_str(), "wb");
  gzwrite(g, raw.data(), static_cast<unsigned>(raw.size()));
  gzclose(g);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  Bytes out;
  int c;
  while ((c = std::fgetc(f)) != EOF) out.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  std::remove(path.c_str());
  return out;
}

// An IDX header (type, dims big-endian) followed by `data`.
Bytes idx(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes b{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) b.insert(b.end(), {uint8_t(d >> 24), uint8_t(d >> 16), uint8_t(d >> 8), uint8_t(d)});
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes iota_bytes(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7);
  return b;
}

}  // namespace

TEST(Idx, ReadsPlainFile) {
  std::string path = write_file("plain.idx", idx(0x08, {2, 3, 4}, iota_bytes(24)));
  IdxArray a = read_idx(path);
  EXPECT_EQ(a.shape, (Shape{2, 3, 4}));
  EXPECT_EQ(a.data, iota_bytes(24));
}

TEST(Idx, ReadsGzippedFileAndConcatenatedMembers) {
  Bytes raw = idx(0x08, {5, 7}, iota_bytes(35));
  IdxArray a = read_idx(write_file("one.idx.gz", gzip(raw)));
  EXPECT_EQ(a.shape, (Shape{5, 7}));
  EXPECT_EQ(a.data, iota_bytes(35));
  // `cat header.gz data.gz` is one valid gzip file.
  Bytes two = gzip(Bytes(raw.begin(), raw.begin() + 10));
  Bytes rest = gzip(Bytes(raw.begin() + 10, raw.end()));
  two.insert(two.end(), rest.begin(), rest.end());
  EXPECT_EQ(read_idx(write_file("two.idx.gz", two)).data, iota_bytes(35));
}

TEST(Idx, ReadsEmptyArray) {
  IdxArray a = read_idx(write_file("empty.idx", idx(0x08, {0, 28}, {})));
  EXPECT_EQ(a.shape, (Shape{0, 28}));
  EXPECT_TRUE(a.data.empty());
}

TEST(Idx, MissingFile) {
  std::string path = temp_path("does_not_exist.idx");
  expect_error<IoError>([&] { read_idx(path); }, {"[idx]", path.c_str(), "No such file"});
}

TEST(Idx, BadMagicShowsBytesInHex) {
  std::string path = write_file("zip.idx", {'P', 'K', 3, 4, 0, 0, 0, 0});
  expect_error<IoError>([&] { read_idx(path); }, {"[idx]", path.c_str(), "not an IDX file", "50 4b 03 04"});
  std::string tiny = write_file("tiny.idx", {0, 0});
  expect_error<IoError>([&] { read_idx(tiny); }, {"[idx]", tiny.c_str(), "not an IDX file", "2 bytes"});
  std::string no_dims = write_file("nodims.idx", {0, 0, 8, 0});
  expect_error<IoError>([&] { read_idx(no_dims); }, {"[idx]", no_dims.c_str(), "0 dimensions"});
}

TEST(Idx, TruncatedData) {
  std::string path = write_file("short.idx", idx(0x08, {2, 3}, iota_bytes(4)));
  expect_error<IoError>([&] { read_idx(path); }, {"[idx]", path.c_str(), "truncated", "6 data bytes, got 4"});
  std::string header = write_file("short_header.idx", {0, 0, 8, 3, 0, 0, 0, 2});
  expect_error<IoError>([&] { read_idx(header); }, {"[idx]", header.c_str(), "truncated", "16 bytes"});
}

TEST(Idx, TrailingBytes) {
  std::string path = write_file("long.idx", idx(0x08, {2, 3}, iota_bytes(8)));
  expect_error<IoError>([&] { read_idx(path); }, {"[idx]", path.c_str(), "2 trailing bytes", "6 data bytes"});
  Bytes gz = gzip(idx(0x08, {2}, iota_bytes(2)));
  gz.insert(gz.end(), {'j', 'u', 'n', 'k'});
  std::string gz_path = write_file("junk.idx.gz", gz);
  expect_error<IoError>([&] { read_idx(gz_path); }, {"[idx]", gz_path.c_str(), "4 trailing bytes after its gzip stream"});
}

TEST(Idx, UnsupportedElementType) {
  std::string path = write_file("float.idx", idx(0x0D, {2}, Bytes(8, 0)));
  expect_error<NotSupportedError>([&] { read_idx(path); }, {"[idx]", path.c_str(), "0x0d", "float32", "0x08"});
}

TEST(Idx, CorruptAndTruncatedGzip) {
  Bytes gz = gzip(idx(0x08, {100}, iota_bytes(100)));
  Bytes cut(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2));
  std::string cut_path = write_file("cut.idx.gz", cut);
  expect_error<IoError>([&] { read_idx(cut_path); }, {"[idx]", cut_path.c_str(), "truncated gzip stream"});
  Bytes bad = gz;
  bad[bad.size() - 8] ^= 0xff;  // the CRC-32 in the trailer
  std::string bad_path = write_file("bad.idx.gz", bad);
  expect_error<IoError>([&] { read_idx(bad_path); }, {"[idx]", bad_path.c_str(), "corrupt gzip stream"});
}

TEST(Idx, HugeDimensionsFailBeforeAllocating) {
  std::string path = write_file("huge.idx", idx(0x08, {65536, 65536}, {}));
  expect_error<IoError>([&] { read_idx(path); }, {"[idx]", path.c_str(), "more than 2^31 elements"});
  std::string wrap = write_file("wrap.idx", idx(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
  expect_error<IoError>([&] { read_idx(wrap); }, {"[idx]", "more than 2^31 elements"});
}

// A plain file cut at every sixteenth of its length (k = 0..15) is refused, never read as a shorter
// dataset: the header's dims fix the length exactly.
TEST(Idx, TruncatedAtEverySixteenthIsRefused) {
  const Bytes full = idx(0x08, {10, 7, 3}, iota_bytes(210));  // 16 header bytes + 210 data bytes
  for (size_t k = 0; k < 16; ++k) {
    const size_t length = full.size() * k / 16;
    const std::string path = write_file("cut_" + std::to_string(k) + ".idx", Bytes(full.begin(), full.begin() + length));
    SCOPED_TRACE("cut at " + std::to_string(k) + "/16: " + std::to_string(length) + " of " + std::to_string(full.size()) + " bytes");
    expect_error<IoError>([&] { read_idx(path); }, {"[idx]", path.c_str()});
  }
  EXPECT_EQ(read_idx(write_file("uncut.idx", full)).data, iota_bytes(210));
}

// Every single-byte change in a plain file's header is refused with an error naming the file: the
// magic and type are checked, and a changed dim or dim count no longer matches the file's length.
// A flipped byte in the payload of a plain file cannot be detected: IDX has no checksum (a gzipped
// file does: its CRC-32, checked below).
TEST(Idx, AFlippedHeaderByteIsRefused) {
  const Bytes full = idx(0x08, {10, 7, 3}, iota_bytes(210));
  for (size_t at = 0; at < 16; ++at) {
    for (uint8_t mask : {0x01, 0x02, 0x10, 0x80, 0xff}) {
      Bytes bytes = full;
      bytes[at] ^= mask;
      const std::string path = write_file("flip.idx", bytes);
      SCOPED_TRACE("header byte " + std::to_string(at) + " ^ " + std::to_string(mask));
      try {
        read_idx(path);
        ADD_FAILURE() << "a changed header was read as a valid file";
      } catch (const Error& e) {  // IoError, or NotSupportedError for another element type
        EXPECT_NE(std::string(e.what()).find("[idx] " + path), std::string::npos) << e.what();
      }
    }
  }
}

TEST(Idx, AFlippedPayloadByteOfAGzippedFileIsRefused) {
  const Bytes gz = gzip(idx(0x08, {10, 7, 3}, iota_bytes(210)));
  // The deflate data and the trailer; the gzip header's own fields (mtime, OS) are not checksummed.
  for (size_t at = 10; at < gz.size(); ++at) {
    Bytes bytes = gz;
    bytes[at] ^= 0x04;
    const std::string path = write_file("flip.idx.gz", bytes);
    SCOPED_TRACE("byte " + std::to_string(at) + " of " + std::to_string(gz.size()));
    expect_error<IoError>([&] { read_idx(path); }, {"[idx]", path.c_str()});
  }
}
