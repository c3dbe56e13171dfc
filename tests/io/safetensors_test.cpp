// safetensors encode/decode, validation of malformed files, and the atomic file helpers.
#include "tessera/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "tessera/io/atomic_file.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;
using tessera::testing::expect_error;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("tessera_io_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

std::string bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
}

void expect_same(const nn::StateDict& a, const nn::StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.dtype(), b[i].second.dtype()) << a[i].first;
    EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first;
    EXPECT_EQ(bytes_of(a[i].second), bytes_of(b[i].second)) << a[i].first;
  }
}

// A file per the spec from a header text and data bytes; the header is padded to 8 as usual.
std::string make_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

// Decodes from an exactly-sized heap copy, so AddressSanitizer catches any read past the end.
SafetensorsFile decode_exact(const std::string& bytes, const std::string& source = "test.safetensors") {
  std::unique_ptr<char[]> copy(new char[bytes.size() + (bytes.empty() ? 1 : 0)]);
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  return decode_safetensors(std::string_view(copy.get(), bytes.size()), source);
}

void expect_rejected(const std::string& bytes, std::initializer_list<const char*> fragments) {
  expect_error<IoError>([&] { decode_exact(bytes, "bad.safetensors"); }, fragments);
  expect_error<IoError>([&] { decode_exact(bytes, "bad.safetensors"); }, {"[safetensors] bad.safetensors: "});
}

nn::StateDict sample_tensors() {
  manual_seed(3);
  return {{"layer.weight", randn({3, 5})},
          {"labels", from_vector(std::vector<int64_t>{-1, 0, 1LL << 40, 9}, {4})},
          {"half", randn({7}).to(DType::BFloat16)},  // 14 bytes: later offsets are not 8-aligned
          {"scalar", scalar_tensor(2.5f)},
          {"empty", zeros({0, 3})},
          {"empty_i64", zeros({2, 0}, DType::Int64)},
          {"fp16", randn({3}).to(DType::Float16)},
          {"last", randn({2, 2})}};
}

TEST_F(SafetensorsTest, RoundTripAllDtypesScalarAndEmptyInOrder) {
  nn::StateDict tensors = sample_tensors();
  std::string bytes = encode_safetensors(tensors);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-aligned";
  SafetensorsFile f = decode_exact(bytes);
  expect_same(tensors, f.tensors);
  EXPECT_EQ(f.tensors[3].second.dim(), 0);
  EXPECT_EQ(f.tensors[3].second.item<float>(), 2.5f);
}

TEST_F(SafetensorsTest, NonContiguousTensorsAreWrittenContiguous) {
  Tensor base = randn({3, 4});
  Tensor t = base.transpose(0, 1);
  Tensor s = base.slice(1, 1, 4, 2);
  ASSERT_FALSE(t.is_contiguous());
  SafetensorsFile f = decode_exact(encode_safetensors({{"t", t}, {"s", s}}));
  EXPECT_EQ(f.tensors[0].second.shape(), (Shape{4, 3}));
  EXPECT_EQ(f.tensors[0].second.to_vector<float>(), t.to_vector<float>());
  EXPECT_EQ(f.tensors[1].second.to_vector<float>(), s.to_vector<float>());
}

TEST_F(SafetensorsTest, MetadataRoundTripAndChecksumIsOurs) {
  Metadata meta{{"format", "pt"}, {"tessera.step", "12"}, {"unicode", "λ ✓"}, {"tessera.checksum", "crc32:00000000"}};
  SafetensorsFile f = decode_exact(encode_safetensors({{"x", ones({2})}}, meta));
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("tessera.step"), "12");
  EXPECT_EQ(f.metadata.at("unicode"), "λ ✓");
  EXPECT_NE(f.metadata.at("tessera.checksum"), "crc32:00000000") << "a stale checksum must be replaced";
  EXPECT_EQ(f.metadata.at("tessera.crc32.x"), f.metadata.at("tessera.checksum")) << "x is the whole data section";
  EXPECT_EQ(f.metadata.size(), 5u);
  // Stale per-tensor checksums given as metadata are dropped, not carried into the new file.
  meta["tessera.crc32.gone"] = "crc32:00000000";
  meta["tessera.crc32.x"] = "crc32:00000000";
  SafetensorsFile g = decode_exact(encode_safetensors({{"x", ones({2})}}, meta));
  EXPECT_EQ(g.metadata.count("tessera.crc32.gone"), 0u);
  EXPECT_EQ(g.metadata.at("tessera.crc32.x"), f.metadata.at("tessera.crc32.x"));
  // An empty state dict is a valid file too.
  EXPECT_TRUE(decode_exact(encode_safetensors({})).tensors.empty());
}

// The exact bytes of our encoding of a tiny file, written out by hand per the spec.
TEST_F(SafetensorsTest, EncodesExactBytes) {
  std::string got = encode_safetensors({{"w", from_vector(std::vector<float>{1.0f, -2.0f}, {2})},
                                        {"n", from_vector(std::vector<int64_t>{7}, {})}},
                                       {{"format", "pt"}});
  std::string header =
      R"({"__metadata__":{"format":"pt","tessera.checksum":"crc32:fdc396fc","tessera.crc32.n":"crc32:6fe7d670",)"
      R"("tessera.crc32.w":"crc32:c3872656"},)"
      R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"n":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})"
      "    ";  // 244 bytes of JSON + 4 spaces = 248
  std::string expected("\xf8\0\0\0\0\0\0\0", 8);
  expected += header;
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x07\x00\x00\x00\x00\x00\x00\x00", 16);
  EXPECT_EQ(got, expected);
}

// What PyTorch's safetensors writes: no checksum, maybe no metadata, keys in any order, BF16 data.
TEST_F(SafetensorsTest, DecodesFileAsPyTorchWritesIt) {
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b.bias":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
      R"("a.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})";
  std::string data("\x00\x00\x80\x3f\x00\x00\x40\x40" "\x80\x3f\x00\xc0", 12);  // 1, 3 | bf16 1, -2
  SafetensorsFile f = decode_exact(make_file(header, data));
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "a.weight");  // file order: by offset, not header order
  EXPECT_EQ(f.tensors[0].second.shape(), (Shape{1, 2}));
  EXPECT_EQ(f.tensors[0].second.to_vector<float>(), (std::vector<float>{1.0f, 3.0f}));
  EXPECT_EQ(f.tensors[1].first, "b.bias");
  EXPECT_EQ(f.tensors[1].second.dtype(), DType::BFloat16);
  EXPECT_EQ(f.tensors[1].second.to(DType::Float32).to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(f.metadata, (Metadata{{"format", "pt"}}));
  // No metadata at all, and a header without padding.
  std::string bare = R"({"x":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})";
  uint64_t n = bare.size();
  std::string file = std::string(reinterpret_cast<const char*>(&n), 8) + bare + std::string("\x05\0\0\0\0\0\0\0", 8);
  EXPECT_EQ(decode_exact(file).tensors.at(0).second.item<int64_t>(), 5);
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

TEST_F(SafetensorsTest, RejectsMalformedFramingAndHeader) {
  expect_rejected("", {"0 bytes, shorter than the 8-byte header length"});
  expect_rejected(std::string("\x01\0\0", 3), {"3 bytes"});
  std::string big("\0\0\0\0\x01\0\0\0", 8);  // 2^32
  expect_rejected(big + "{}", {"above the 100 MiB limit"});
  std::string long_n("\x40\0\0\0\0\0\0\0", 8);  // 64 > 10 bytes left
  expect_rejected(long_n + "{}        ", {"header length 64 is larger than the file (18 bytes)"});
  expect_rejected(make_file("{\"a\":", ""), {"header is not valid JSON"});
  expect_rejected(make_file("", ""), {"header is not valid JSON"});
  expect_rejected(make_file("[1,2]", ""), {"header is not a JSON object"});
  expect_rejected(make_file("{\"__metadata__\":{\"k\":1}}", ""), {"\"__metadata__\" value for 'k' is not a string"});
  expect_rejected(make_file("{\"__metadata__\":[]}", ""), {"\"__metadata__\" is not an object"});
  expect_rejected(make_file("{\"x\":3}", ""), {"tensor 'x': entry is not an object"});
}

TEST_F(SafetensorsTest, RejectsBadTensorEntries) {
  std::string d8(8, '\0');
  expect_rejected(make_file("{" + entry("w", "F64", "[1]", "[0,8]") + "}", d8), {"tensor 'w': unknown dtype 'F64'"});
  expect_rejected(make_file("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", d8), {"tensor 'w': missing or non-string \"dtype\""});
  for (const char* shape : {"[-2]", "[2.0]", "\"2\"", "[[2]]", "[18446744073709551615]", "{}"})
    expect_rejected(make_file("{" + entry("w", "F32", shape, "[0,8]") + "}", d8),
                    {"tensor 'w': \"shape\" is not an array of non-negative integers"});
  for (const char* offsets : {"[0]", "[0,8,8]", "[-1,8]", "[0,8.5]", "8", "[\"0\",8]"})
    expect_rejected(make_file("{" + entry("w", "F32", "[2]", offsets) + "}", d8),
                    {"tensor 'w': \"data_offsets\" is not an array of two non-negative integers"});
  expect_rejected(make_file("{" + entry("w", "F32", "[4294967296,4294967296,4294967296]", "[0,8]") + "}", d8),
                  {"tensor 'w': shape [4294967296,4294967296,4294967296] is too large"});
  expect_rejected(make_file("{" + entry("", "F32", "[2]", "[0,8]") + "}", d8), {"a tensor has an empty name"});
}

TEST_F(SafetensorsTest, RejectsBadLayout) {
  std::string d8(8, '\0'), d16(16, '\0');
  expect_rejected(make_file("{" + entry("w", "F32", "[4]", "[0,16]") + "}", d8),
                  {"tensor 'w': data_offsets [0, 16) lie outside the data section of 8 bytes"});
  expect_rejected(make_file("{" + entry("w", "F32", "[2]", "[8,0]") + "}", d8), {"tensor 'w': data_offsets [8, 0) lie outside"});
  expect_rejected(make_file("{" + entry("w", "F32", "[3]", "[0,8]") + "}", d8),
                  {"tensor 'w': data_offsets [0, 8) hold 8 bytes but shape [3] of F32 needs 3 x 4"});
  expect_rejected(make_file("{" + entry("a", "F32", "[3]", "[0,12]") + "," + entry("b", "F32", "[2]", "[8,16]") + "}", d16),
                  {"tensors 'a' and 'b' overlap"});
  expect_rejected(make_file("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[2]", "[8,16]") + "}", d16),
                  {"bytes [4, 8) of the data section are not covered by any tensor"});
  expect_rejected(make_file("{" + entry("a", "F32", "[2]", "[0,8]") + "}", d16),
                  {"bytes [8, 16) of the data section are not covered by any tensor"});
  expect_rejected(make_file("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("a", "F32", "[2]", "[8,16]") + "}", d16),
                  {"duplicate name 'a'"});
}

// A flipped bit anywhere in a tensor's payload is refused with that tensor and the file named.
TEST_F(SafetensorsTest, AFlippedPayloadByteNamesTheTensorItHit) {
  const nn::StateDict tensors = sample_tensors();
  const std::string valid = encode_safetensors(tensors);
  uint64_t n;
  std::memcpy(&n, valid.data(), 8);
  size_t begin = 8 + n;
  for (const auto& [name, t] : tensors) {
    const size_t nbytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    for (size_t at : {begin, begin + nbytes / 2, begin + nbytes - 1}) {
      if (nbytes == 0) break;  // "empty" and "empty_i64" own no bytes
      std::string bytes = valid;
      bytes[at] ^= 0x10;
      const std::string named = "tensor '" + name + "' is corrupt";
      expect_rejected(bytes, {named.c_str(), "but the metadata says crc32:", "restore the file"});
    }
    begin += nbytes;
  }
  ASSERT_EQ(begin, valid.size());
  // From disk, the error names the file.
  std::string on_disk = valid;
  on_disk[valid.size() - 1] ^= 0x01;  // the last byte of "last"
  write_file_atomic(path("model.safetensors"), on_disk);
  const std::string file = path("model.safetensors");
  expect_error<IoError>([&] { load_safetensors(file); }, {("[safetensors] " + file + ": tensor 'last' is corrupt").c_str()});
  std::string header = R"({"__metadata__":{"tessera.crc32.a":"crc32:12"},)" + entry("a", "F32", "[2]", "[0,8]") + "}";
  expect_rejected(make_file(header, std::string(8, '\0')), {"malformed checksum 'crc32:12' in 'tessera.crc32.a'"});
}

// tessera files from before the per-tensor checksums carry only the whole-section one: still checked.
TEST_F(SafetensorsTest, TheWholeSectionChecksumOfOlderFilesIsStillChecked) {
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1, -2
  const std::string header = R"({"__metadata__":{"tessera.checksum":"crc32:c3872656"},)" + entry("w", "F32", "[2]", "[0,8]") + "}";
  EXPECT_EQ(decode_exact(make_file(header, data)).tensors.at(0).second.to_vector<float>(), (std::vector<float>{1, -2}));
  std::string flipped = data;
  flipped[5] ^= 0x01;
  expect_rejected(make_file(header, flipped), {"checksum mismatch: the file is corrupt"});
  std::string bad = R"({"__metadata__":{"tessera.checksum":"md5:abc"},)" + entry("a", "F32", "[2]", "[0,8]") + "}";
  expect_rejected(make_file(bad, std::string(8, '\0')), {"malformed checksum 'md5:abc'"});
  // A checksum for a tensor the file does not hold (a tool dropped it) is no reason to refuse the rest.
  const std::string dropped =
      R"({"__metadata__":{"tessera.crc32.gone":"crc32:00000000"},)" + entry("w", "F32", "[2]", "[0,8]") + "}";
  EXPECT_EQ(decode_exact(make_file(dropped, data)).tensors.size(), 1u);
}

TEST_F(SafetensorsTest, AFileWithoutChecksumsLoadsFromDisk) {
  // As PyTorch's safetensors writes it: no tessera metadata at all.
  const std::string header = R"({"__metadata__":{"format":"pt"},)" + entry("w", "F32", "[2]", "[0,8]") + "}";
  write_file_atomic(path("torch.safetensors"), make_file(header, std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8)));
  SafetensorsFile f = load_safetensors(path("torch.safetensors"));
  EXPECT_EQ(f.tensors.at(0).second.to_vector<float>(), (std::vector<float>{1, -2}));
  EXPECT_EQ(f.metadata, (Metadata{{"format", "pt"}}));
}

TEST_F(SafetensorsTest, EncodeRejectsCallerMistakes) {
  expect_error<ValueError>([] { encode_safetensors({{"a", Tensor()}}); }, {"[safetensors]", "tensor 'a' is undefined"});
  expect_error<ValueError>([] { encode_safetensors({{"a", ones({1})}, {"a", ones({1})}}); }, {"duplicate tensor name 'a'"});
  expect_error<ValueError>([] { encode_safetensors({{"", ones({1})}}); }, {"empty name"});
  expect_error<ValueError>([] { encode_safetensors({{"__metadata__", ones({1})}}); }, {"reserved"});
  expect_error<ValueError>([] { encode_safetensors({{"bad\xff", ones({1})}}); }, {"valid UTF-8"});
  expect_error<ValueError>([&] { save_safetensors(path("m.safetensors"), {{"a", Tensor()}}); },
                           {"cannot write", "m.safetensors"});
}

// Malformed input may only ever raise tessera::Error: flip bytes (mostly in the header, where the
// parser works) and truncate a valid file, many times.
TEST_F(SafetensorsTest, FuzzedFilesOnlyRaiseTesseraErrors) {
  const std::string valid = encode_safetensors(sample_tensors(), {{"format", "pt"}});
  uint64_t n;
  std::memcpy(&n, valid.data(), 8);
  std::mt19937_64 rng(42);
  int decoded = 0, rejected = 0;
  auto attempt = [&](const std::string& bytes) {
    try {
      decode_exact(bytes);
      ++decoded;
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-tessera exception: " << e.what();
    }
  };
  for (size_t len = 0; len < valid.size(); ++len) attempt(valid.substr(0, len));
  const char interesting[] = {'0', '9', '-', '"', '{', '}', '[', ']', ',', ':', ' ', '\0', '\xff', 'e', '.'};
  for (int iter = 0; iter < 4000; ++iter) {
    std::string bytes = valid;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      size_t at = rng() % 10 < 8 ? 8 + rng() % n : rng() % bytes.size();
      bytes[at] = rng() % 2 ? static_cast<char>(rng()) : interesting[rng() % sizeof interesting];
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    attempt(bytes);
  }
  EXPECT_GT(rejected, 1000);
  SUCCEED() << decoded << " mutated files still decoded (e.g. flips in padding), " << rejected << " rejected";
}

TEST_F(SafetensorsTest, SaveAndLoadFiles) {
  nn::StateDict tensors = sample_tensors();
  save_safetensors(path("model.safetensors"), tensors, {{"format", "pt"}});
  SafetensorsFile f = load_safetensors(path("model.safetensors"));
  expect_same(tensors, f.tensors);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(listing(), (std::vector<std::string>{"model.safetensors"}));
  write_file_atomic(path("model.safetensors"), "garbage");
  expect_error<IoError>([&] { load_safetensors(path("model.safetensors")); }, {"[safetensors] ", path("model.safetensors").c_str()});
}

TEST_F(SafetensorsTest, AtomicWriteReplacesContentAndLeavesNoTempFiles) {
  const std::string p = path("latest");
  write_file_atomic(p, "first, a longer text");
  EXPECT_EQ(read_file(p), "first, a longer text");
  write_file_atomic(p, "second");
  EXPECT_EQ(read_file(p), "second");
  write_file_atomic(p, "");
  EXPECT_EQ(read_file(p), "");
  std::string binary("a\0b\xff", 4);
  write_file_atomic(p, binary);
  EXPECT_EQ(read_file(p), binary);
  EXPECT_EQ(listing(), (std::vector<std::string>{"latest"}));
}

TEST_F(SafetensorsTest, AtomicWriteFailuresNameThePathAndCleanUp) {
  const std::string missing_dir = path("no/such/dir/file");
  expect_error<IoError>([&] { write_file_atomic(missing_dir, "x"); },
                        {"[write_file_atomic] ", missing_dir.c_str(), "No such file or directory"});
  // Renaming a file over a directory fails after the temp file was written: it must be removed.
  fs::create_directories(path("target_is_dir"));
  expect_error<IoError>([&] { write_file_atomic(path("target_is_dir"), "x"); },
                        {"[write_file_atomic] ", path("target_is_dir").c_str(), "Is a directory"});
  EXPECT_EQ(listing(), (std::vector<std::string>{"target_is_dir"}));
  expect_error<IoError>([&] { fsync_directory(path("nope")); }, {"[fsync_directory] ", path("nope").c_str()});
  fsync_directory(dir_.string());
}

TEST_F(SafetensorsTest, ReadFileOfMissingPathNamesIt) {
  const std::string p = path("missing.safetensors");
  expect_error<IoError>([&] { read_file(p); }, {("[read_file] " + p + ": No such file or directory").c_str()});
  expect_error<IoError>([&] { load_safetensors(p); }, {"[read_file] ", p.c_str()});
  expect_error<IoError>([&] { read_file(dir_.string()); }, {"[read_file] ", "Is a directory"});
}

}  // namespace
}  // namespace tessera::io
