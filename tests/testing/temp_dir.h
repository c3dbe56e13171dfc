// Scratch directories and files for tests that write runs, checkpoints and logs.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera::testing {

// An empty directory <gtest temp>/tessera_<suite>_<name>_<pid>, removed first if a run left it.
inline std::string fresh_dir(const std::string& suite, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(::testing::TempDir()) / ("tessera_" + suite + "_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A file's whole text ("" when it does not exist).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A small text corpus at <dir>/corpus.txt (about 150 bytes a line group; `lines` lines in all) with
// enough structure for a language model's loss to move; returns its path.
inline std::string write_corpus(const std::string& dir, int lines = 40) {
  const char* sentences[] = {"the quick brown fox jumps over the lazy dog\n", "pack my box with five dozen liquor jugs\n",
                             "how vexingly quick daft zebras jump\n", "sphinx of black quartz, judge my vow\n"};
  std::string text;
  for (int i = 0; i < lines; ++i) text += sentences[(i * 7) % 4];
  const std::string path = dir + "/corpus.txt";
  std::ofstream(path) << text;
  return path;
}

// Flips bits of a file's last byte (a checksum's test of corruption).
inline void flip_last_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.get(c);
  f.seekp(-1, std::ios::end);
  f.put(static_cast<char>(c ^ 0x5a));
}

}  // namespace tessera::testing
