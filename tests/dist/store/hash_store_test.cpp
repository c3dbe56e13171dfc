// HashStore specifics: exact timeout messages and waking across threads. The operations
// themselves are covered for every store in store_conformance_test.cpp.
#include "tessera/dist/store/hash_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/store/key_value_table.h"

namespace tessera::dist {
namespace {

using namespace std::chrono_literals;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const TimeoutError& e) {
    return e.what();
  }
  return "no TimeoutError";
}

TEST(HashStoreTest, WaitTimeoutMessageListsMissingKeys) {
  HashStore s;
  s.set("c", std::string("present"));
  EXPECT_EQ(error_of([&] { s.wait({"a", "b", "c"}, 50ms); }),
            "[HashStore::wait] timed out after 50 ms waiting for keys: a, b");
}

TEST(HashStoreTest, GetUsesTheStoreTimeout) {
  HashStore s(50ms);
  EXPECT_EQ(error_of([&] { s.get("x"); }), "[HashStore::get] timed out after 50 ms waiting for keys: x");
}

TEST(HashStoreTest, DefaultWaitUsesTheStoreTimeout) {
  HashStore s;
  s.set_timeout(30ms);
  EXPECT_EQ(error_of([&] { s.wait({"x"}); }), "[HashStore::wait] timed out after 30 ms waiting for keys: x");
}

TEST(HashStoreTest, HugeTimeoutDoesNotOverflow) {
  HashStore s;
  s.set("k", std::string("v"));
  s.wait({"k"}, Milliseconds::max());
  s.set_timeout(Milliseconds::max());
  EXPECT_EQ(s.get_string("k"), "v");
}

TEST(HashStoreTest, WaitIsWokenByAddAndCompareSet) {
  HashStore s;
  std::thread t([&] {
    s.wait({"counter", "cas"}, 10s);
    s.set("seen", std::string("1"));
  });
  s.add("counter", 1);
  s.compare_set("cas", {}, Bytes{1});
  s.wait({"seen"}, 10s);
  t.join();
}

TEST(KeyValueTableTest, FormatKeysShortensLongLists) {
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) {
    std::string key = "k";  // not "k" + to_string(i): GCC 12 warns falsely on that (-Wrestrict, PR 105329)
    keys.push_back(key += std::to_string(i));
  }
  std::string text = detail::format_keys(keys);
  EXPECT_NE(text.find("k0, k1"), std::string::npos);
  EXPECT_NE(text.find("k15 and 4 more"), std::string::npos) << text;
  EXPECT_EQ(text.find("k16"), std::string::npos);
}

}  // namespace
}  // namespace tessera::dist
