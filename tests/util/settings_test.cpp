// The settings registry (util/settings.h) is the one place TESSERA_* variables are read and listed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <stdexcept>

#include "tessera/core/error.h"
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

TEST(Settings, DocsListExactlyTheRegisteredSettingsWithWhatTheyAccept) {
  const std::string doc = tessera::testing::read_text(std::string(TESSERA_SOURCE_DIR) + "/docs/settings.md");
  std::set<std::string> listed;
  const std::regex row("\\| `(TESSERA_[A-Z0-9_]+)` \\|[^\n]*\\| ([^|\n]+) \\|\n");
  for (std::sregex_iterator it(doc.begin(), doc.end(), row), end; it != end; ++it) {
    const std::string name = (*it)[1];
    listed.insert(name);
    for (const Setting& s : all_settings()) {
      if (s.name == name) {
        EXPECT_EQ((*it)[2].str(), accepted_values(s)) << name << "'s values column";
      }
    }
  }
  EXPECT_EQ(listed, registered());
}

// One reader per type: the value, the caller's fallback when unset, and for anything else an error
// that names the variable, what it got and what it accepts.
TEST(Settings, TypedReadersCheckTheRegisteredBounds) {
  ::unsetenv("TESSERA_COMM_PRIORITY");
  EXPECT_EQ(env_int("TESSERA_COMM_PRIORITY", 10), 10);
  ::setenv("TESSERA_COMM_PRIORITY", "39", 1);
  EXPECT_EQ(env_int("TESSERA_COMM_PRIORITY", 10), 39);
  for (const char* bad : {"40", "-1", "7x", "x", " 7", "99999999999999999999999"}) {
    ::setenv("TESSERA_COMM_PRIORITY", bad, 1);
    try {
      env_int("TESSERA_COMM_PRIORITY", 10);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ValueError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("[TESSERA_COMM_PRIORITY]"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("from 0 to 39"), std::string::npos) << message;
    }
  }
  ::unsetenv("TESSERA_COMM_PRIORITY");

  EXPECT_TRUE(env_flag("TESSERA_BIND_CORES", true));
  for (const char* off : {"0", "false", "OFF", "no"}) {
    ::setenv("TESSERA_BIND_CORES", off, 1);
    EXPECT_FALSE(env_flag("TESSERA_BIND_CORES", true)) << off;
  }
  for (const char* on : {"1", "True", "on", "YES"}) {
    ::setenv("TESSERA_BIND_CORES", on, 1);
    EXPECT_TRUE(env_flag("TESSERA_BIND_CORES", false)) << on;
  }
  ::setenv("TESSERA_BIND_CORES", "2", 1);
  EXPECT_THROW(env_flag("TESSERA_BIND_CORES", true), ValueError);
  ::unsetenv("TESSERA_BIND_CORES");

  EXPECT_THROW(env_int("TESSERA_BIND_CORES", 0), std::logic_error);   // a flag read as an integer
  EXPECT_THROW(env_flag("TESSERA_NUM_THREADS", true), std::logic_error);
  EXPECT_THROW(env_int("TESSERA_NO_SUCH_SETTING", 0), std::logic_error);
}

TEST(Settings, ABadThreadCountStopsTheCommandNamingIt) {
  const std::string dir = tessera::testing::fresh_dir("settings", "bad-threads");
  const std::string cmd = "TESSERA_NUM_THREADS=0 " + std::string(TESSERA_BINARY) + " env > " + dir + "/out 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string out = tessera::testing::read_text(dir + "/out");
  EXPECT_NE(out.find("[TESSERA_NUM_THREADS] expected an integer from 1 to 1024, got '0'"), std::string::npos) << out;
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
