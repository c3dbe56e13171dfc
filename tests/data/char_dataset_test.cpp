// Character-level data: Vocabulary round trips, window shifting, the corpus reader on the real
// fortunes directory (Debian's `fortunes`, which scripts/setup.sh installs) and on a directory built here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tessera/data/char_dataset.h"
#include "testing/expect.h"

using namespace tessera;
using namespace tessera::data;
using tessera::testing::expect_error;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("tessera_text_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::vector<int64_t> range(int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t i = lo; i < hi; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST(Vocabulary, SortedBytesAndRoundTrip) {
  Vocabulary v("hello world");
  EXPECT_EQ(v.size(), 8);
  EXPECT_EQ(v.symbols(), " dehlorw");
  EXPECT_EQ(v.encode("hold"), (std::vector<int64_t>{3, 5, 4, 1}));
  EXPECT_EQ(v.decode(v.encode("world hello")), "world hello");
  expect_error<ValueError>([&] { v.encode("help"); }, {"[Vocabulary]", "'p'", "position 3"});
  expect_error<IndexError>([&] { v.decode({8}); }, {"[Vocabulary]", "id 8"});
  expect_error<ValueError>([] { Vocabulary(""); }, {"empty"});
}

TEST(Vocabulary, StoredAsAsciiEvenForUtf8Bytes) {
  const std::string text = "caf\xc3\xa9 na\xc3\xafve\n";  // "café naïve"
  Vocabulary v(text);
  std::string stored = v.to_string();
  for (char c : stored) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << stored;
  Vocabulary back = Vocabulary::from_string(stored);
  EXPECT_EQ(back.symbols(), v.symbols());
  EXPECT_EQ(back.decode(v.encode(text)), text);
  expect_error<ValueError>([] { Vocabulary::from_string("0a2"); }, {"[Vocabulary]", "even-length"});
  expect_error<ValueError>([] { Vocabulary::from_string("0aZZ"); }, {"non-hex", "Z"});
  expect_error<ValueError>([] { Vocabulary::from_string("610a"); }, {"not sorted"});
}

TEST(CharDataset, WindowsShiftTargetsByOne) {
  CharDataset ds(range(0, 21), 4);  // stride 4: windows at 0, 4, 8, 12, 16 (16..20 needs id 20 as target)
  EXPECT_EQ(ds.size(), 5);
  Batch b = ds.get_batch({0, 4});
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 4}));
  EXPECT_EQ(b.inputs.dtype(), DType::Int64);
  EXPECT_EQ(b.inputs.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 16, 17, 18, 19}));
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 17, 18, 19, 20}));
  CharDataset dense(range(0, 21), 4, 1);
  EXPECT_EQ(dense.size(), 17);
  EXPECT_EQ(dense.get_batch({16}).targets.to_vector<int64_t>(), (std::vector<int64_t>{17, 18, 19, 20}));
  EXPECT_EQ(CharDataset(range(0, 4), 4).size(), 0) << "a window needs context + 1 ids";
  EXPECT_EQ(CharDataset(range(0, 5), 4).size(), 1);
  expect_error<IndexError>([&] { ds.get_batch({5}); }, {"[CharDataset]", "index 5", "5 windows"});
  expect_error<ValueError>([] { CharDataset(range(0, 5), 0); }, {"context"});
}

TEST(CharDataset, SplitSharesOneVocabulary) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "abcdefghij";
  text += "XYZ";  // only in the validation part: the vocabulary still covers it
  auto split = split_char_corpus(text, 8, 0.1);
  EXPECT_EQ(split.vocabulary->size(), 13);
  EXPECT_EQ(split.train->ids().size() + split.validation->ids().size(), text.size());
  EXPECT_EQ(split.validation->ids().size(), 100u);
  std::vector<int64_t> joined = split.train->ids();
  joined.insert(joined.end(), split.validation->ids().begin(), split.validation->ids().end());
  EXPECT_EQ(split.vocabulary->decode(joined), text);
  EXPECT_EQ(split.train->size(), (903 - 9) / 8 + 1);
  EXPECT_EQ(split.validation->context(), 8);
  auto no_val = split_char_corpus(text, 8, 0.0);
  EXPECT_EQ(no_val.validation->size(), 0);
  expect_error<ValueError>([] { split_char_corpus("abcdefghijkl", 8, 0.1); }, {"validation part", "context + 1 = 9"});
  expect_error<ValueError>([] { split_char_corpus("abc", 8, 0.0); }, {"training part", "3 characters"});
}

TEST(TextCorpus, DirectoryFollowsTheFortuneConvention) {
  std::string dir = fresh_dir("corpus");
  write(fs::path(dir) / "b", "second\n");
  write(fs::path(dir) / "a", "first");  // no final newline: one is added between files
  write(fs::path(dir) / "a.dat", std::string("\0\0\0\2binary", 10));
  write(fs::path(dir) / ".hidden", "hidden\n");
  fs::create_symlink("b", fs::path(dir) / "b.u8");
  fs::create_directories(fs::path(dir) / "sub");
  write(fs::path(dir) / "sub" / "c", "nested\n");
  EXPECT_EQ(read_text_corpus(dir), "first\nsecond\n");
  EXPECT_EQ(read_text_corpus(dir + "/b"), "second\n");

  expect_error<IoError>([&] { read_text_corpus(dir + "/missing"); }, {"[text]", "missing", "does not exist"});
  std::string empty = fresh_dir("corpus_empty");
  write(fs::path(empty) / "only.dat", "x");
  expect_error<IoError>([&] { read_text_corpus(empty); }, {"[text]", empty.c_str(), "no text"});
  write(fs::path(empty) / "blank", "");
  expect_error<IoError>([&] { read_text_corpus(empty + "/blank"); }, {"[text]", "is empty"});
}

TEST(TextCorpus, FortunesDirectory) {
  const std::string dir = "/usr/share/games/fortunes";
  std::string text = read_text_corpus(dir);
  uintmax_t expected = 0;
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string().find('.') == std::string::npos)
      expected += e.file_size(), ++files;
  ASSERT_GT(files, 10);
  EXPECT_GE(text.size(), expected);
  EXPECT_LE(text.size(), expected + files);
  EXPECT_EQ(text.find('\0'), std::string::npos) << "no .dat index was read";
  EXPECT_NE(text.find("\n%\n"), std::string::npos) << "fortunes are separated by % lines";
  auto split = split_char_corpus(text, 64, 0.1);
  EXPECT_GT(split.train->size(), 1000);
  EXPECT_GT(split.validation->size(), 100);
  EXPECT_EQ(Vocabulary::from_string(split.vocabulary->to_string()).symbols(), split.vocabulary->symbols());
}

// Bad corpora behave clearly: an empty file is an IoError naming it; bytes that are not UTF-8 are
// still bytes (the vocabulary is of bytes), so they make a valid dataset that round-trips; a file cut
// anywhere, even inside a multi-byte character, is a valid dataset or a ValueError saying it is too
// short for the context.
TEST(TextCorpus, AnEmptyFileIsAnIoErrorNamingIt) {
  const std::string dir = fresh_dir("corpus_bad_empty");
  write(fs::path(dir) / "empty", "");
  expect_error<IoError>([&] { read_text_corpus(dir + "/empty"); }, {"[text] corpus", (dir + "/empty").c_str(), "is empty"});
}

TEST(TextCorpus, OnlyInvalidUtf8BytesMakeAValidByteDataset) {
  const std::string dir = fresh_dir("corpus_bad_utf8");
  std::string junk;
  for (int i = 0; i < 400; ++i) junk += static_cast<char>(0x80 + (i * 37) % 0x80);  // continuation bytes, 0xc0.., 0xff
  write(fs::path(dir) / "junk", junk);
  const std::string text = read_text_corpus(dir + "/junk");
  ASSERT_EQ(text, junk);
  CharSplit split = split_char_corpus(text, 16, 0.1);
  EXPECT_EQ(split.vocabulary->size(), 128);
  EXPECT_GT(split.train->size(), 0);
  EXPECT_GT(split.validation->size(), 0);
  EXPECT_EQ(split.vocabulary->decode(split.vocabulary->encode(text)), text);
  // The vocabulary is stored in a checkpoint's JSON metadata as hex, so these bytes survive it.
  EXPECT_EQ(Vocabulary::from_string(split.vocabulary->to_string()).symbols(), split.vocabulary->symbols());
  Batch batch = split.train->get_batch({0});
  EXPECT_EQ(batch.inputs.shape(), (Shape{1, 16}));
}

TEST(TextCorpus, ATruncatedFileIsADatasetOrTooShortForTheContext) {
  const std::string dir = fresh_dir("corpus_bad_cut");
  std::string text;
  for (int i = 0; i < 20; ++i) text += "Grüße, 世界 — line " + std::to_string(i) + "\n";  // multi-byte characters
  for (size_t k = 0; k < 16; ++k) {
    const size_t length = text.size() * k / 16;
    const std::string path = dir + "/cut" + std::to_string(k);
    write(path, text.substr(0, length));
    SCOPED_TRACE("cut at " + std::to_string(k) + "/16: " + std::to_string(length) + " bytes");
    if (length == 0) {
      expect_error<IoError>([&] { read_text_corpus(path); }, {"[text] corpus", path.c_str(), "is empty"});
      continue;
    }
    const std::string read = read_text_corpus(path);
    ASSERT_EQ(read, text.substr(0, length));
    try {
      CharSplit split = split_char_corpus(read, 32, 0.1);
      EXPECT_GT(split.train->size(), 0);
      EXPECT_EQ(split.vocabulary->decode(split.vocabulary->encode(read)), read);
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("fewer than context + 1 = 33"), std::string::npos) << e.what();
    }
  }
}
