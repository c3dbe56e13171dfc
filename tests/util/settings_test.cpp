// The settings registry (util/settings.h) is the one place TESSERA_* variables are read and listed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <stdexcept>

#include "tessera/util/settings.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::set<std::string> registered() {
  std::set<std::string> names;
  for (const Setting& s : all_settings()) names.insert(std::string(s.name));
  return names;
}

TEST(Settings, DocsListExactlyTheRegisteredSettings) {
  const std::string doc = tessera::testing::read_text(std::string(TESSERA_SOURCE_DIR) + "/docs/settings.md");
  std::set<std::string> listed;
  const std::regex row("\\| `(TESSERA_[A-Z0-9_]+)` \\|");
  for (std::sregex_iterator it(doc.begin(), doc.end(), row), end; it != end; ++it)
    listed.insert((*it)[1]);
  EXPECT_EQ(listed, registered());
}

TEST(Settings, NoSourceReadsATesseraVariableAroundTheRegistry) {
  const std::regex bare("getenv\\(\\s*\"TESSERA_");
  int files = 0;
  for (const char* dir : {"tessera", "cli", "bench"}) {
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(TESSERA_SOURCE_DIR) / dir)) {
      const std::string path = entry.path().string();
      if (!entry.is_regular_file() || path.ends_with("util/settings.cpp")) continue;
      if (!path.ends_with(".cpp") && !path.ends_with(".h")) continue;
      ++files;
      EXPECT_FALSE(std::regex_search(tessera::testing::read_text(path), bare))
          << path << " reads a TESSERA_* variable with getenv: use env_setting (tessera/util/settings.h)";
    }
  }
  EXPECT_GT(files, 100);
}

TEST(Settings, AnUnregisteredNameIsAProgrammingError) {
  EXPECT_THROW(env_setting("TESSERA_NO_SUCH_SETTING"), std::logic_error);
  ::setenv("TESSERA_CONV", "", 1);
  EXPECT_EQ(env_setting("TESSERA_CONV"), nullptr);  // empty is unset
  ::setenv("TESSERA_CONV", "im2col", 1);
  EXPECT_STREQ(env_setting("TESSERA_CONV"), "im2col");
  ::unsetenv("TESSERA_CONV");
}

TEST(Settings, TesseraEnvPrintsEverySettingWithItsValue) {
  const std::string dir = tessera::testing::fresh_dir("settings", "env");
  const std::string cmd = "TESSERA_SHM_SPIN=17 " + std::string(TESSERA_BINARY) + " env > " + dir + "/out 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string out = tessera::testing::read_text(dir + "/out");
  for (const std::string& name : registered()) EXPECT_NE(out.find(name + "="), std::string::npos) << name << "\n" << out;
  EXPECT_NE(out.find("TESSERA_SHM_SPIN=17\n"), std::string::npos) << out;
  EXPECT_NE(out.find("TESSERA_CONV=(unset)\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
