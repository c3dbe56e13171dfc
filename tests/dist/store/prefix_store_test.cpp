// PrefixStore: keys land under "prefix/" in the inner store, and prefixes do not see each other.
#include "tessera/dist/store/prefix_store.h"

#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/dist/store/hash_store.h"
#include "testing/expect.h"

namespace tessera::dist {
namespace {

using namespace std::chrono_literals;
using tessera::testing::expect_error;

TEST(PrefixStoreTest, KeysAreStoredUnderThePrefix) {
  auto inner = std::make_shared<HashStore>();
  PrefixStore p("pg1", inner);
  p.set("addr/0", std::string("h0"));
  EXPECT_EQ(inner->get_string("pg1/addr/0"), "h0");
  EXPECT_EQ(p.add("n", 2), 2);
  EXPECT_EQ(inner->get_string("pg1/n"), "2");
  EXPECT_TRUE(p.check({"addr/0", "n"}));
  EXPECT_FALSE(inner->check({"addr/0"}));
  EXPECT_TRUE(p.delete_key("n"));
  EXPECT_FALSE(inner->check({"pg1/n"}));
  EXPECT_EQ(p.prefix(), "pg1");
}

TEST(PrefixStoreTest, PrefixesAreIsolatedAndNest) {
  auto inner = std::make_shared<HashStore>();
  auto a = std::make_shared<PrefixStore>("a", inner);
  PrefixStore b("b", inner);
  PrefixStore nested("round2", a);
  a->set("k", std::string("from a"));
  b.set("k", std::string("from b"));
  nested.set("k", std::string("nested"));
  EXPECT_EQ(a->get_string("k"), "from a");
  EXPECT_EQ(b.get_string("k"), "from b");
  EXPECT_EQ(inner->get_string("a/round2/k"), "nested");
}

TEST(PrefixStoreTest, TimeoutsNameTheFullKey) {
  auto inner = std::make_shared<HashStore>(40ms);
  PrefixStore p("sub", inner);
  EXPECT_EQ(p.timeout(), 40ms);
  expect_error<TimeoutError>([&] { p.wait({"x"}); }, {"[HashStore::wait] timed out after 40 ms", "keys: sub/x"});
  expect_error<TimeoutError>([&] { p.get("y"); }, {"keys: sub/y"});
}

TEST(PrefixStoreTest, NullInnerIsRejected) {
  expect_error<ValueError>([] { PrefixStore p("x", nullptr); }, {"[PrefixStore]", "inner store"});
}

}  // namespace
}  // namespace tessera::dist
