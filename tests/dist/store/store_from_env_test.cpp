// store_from_env: the launcher's environment contract, and a clear error per missing variable.
#include "tessera/dist/store/store_from_env.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "store_test_helpers.h"
#include "testing/expect.h"

namespace tessera::dist {
namespace {

using namespace std::chrono_literals;
using tessera::testing::expect_error;

class StoreFromEnvTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"MASTER_ADDR", "MASTER_PORT", "TESSERA_JOB_TOKEN", "RANK"};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_.emplace_back(v, old ? std::optional<std::string>(old) : std::nullopt);
    }
  }
  void TearDown() override {
    for (auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  void set_all(uint16_t port) {
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    ::setenv("TESSERA_JOB_TOKEN", testing::kToken, 1);
    ::setenv("RANK", "2", 1);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(StoreFromEnvTest, ConnectsWithTheLaunchersVariables) {
  testing::LogCapture log;
  TcpStoreServer server(testing::server_options(log));
  set_all(server.port());
  auto store = store_from_env(2s);
  EXPECT_EQ(store->timeout(), 2s);
  store->set("k", std::string("v"));
  EXPECT_EQ(store->get_string("k"), "v");
  expect_error<TimeoutError>([&] { store->wait({"missing"}, 50ms); }, {"rank 2", server.address().c_str()});
}

TEST_F(StoreFromEnvTest, EachMissingVariableIsNamed) {
  for (const char* missing : kVars) {
    set_all(1234);
    ::unsetenv(missing);
    expect_error<ValueError>([] { store_from_env(100ms); }, {"[store_from_env]", missing, "is not set"});
  }
}

TEST_F(StoreFromEnvTest, MalformedNumbersAreNamed) {
  set_all(1234);
  ::setenv("MASTER_PORT", "70000", 1);
  expect_error<ValueError>([] { store_from_env(100ms); }, {"MASTER_PORT='70000'"});
  set_all(1234);
  ::setenv("RANK", "two", 1);
  expect_error<ValueError>([] { store_from_env(100ms); }, {"RANK='two'"});
}

}  // namespace
}  // namespace tessera::dist
