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

}  // namespace tessera::testing
