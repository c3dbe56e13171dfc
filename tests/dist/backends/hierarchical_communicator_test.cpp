// The hierarchical communicator over threads: "hosts" are ids given to make_hierarchical_communicator,
// so shared memory joins the ranks of one id and TCP (on loopback) the ids' leaders. The whole
// collective suite runs on it, for even and uneven hosts; across real hosts it runs in
// tests/cluster/multi_host_test.cpp.
#include <gtest/gtest.h>

#include "dist/collective_suite.h"

namespace tessera {
namespace {

std::vector<std::string> suite_on_hosts(const std::vector<std::string>& host_of_rank) {
  const int world = static_cast<int>(host_of_rank.size());
  dist::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(60);  // a failing test fails instead of hanging
  testing::SuiteOptions suite;
  suite.sizes = {0, 1, 7, 1027, 16385, 262147};
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::string> names(static_cast<size_t>(world));
  std::vector<char> abortable(static_cast<size_t>(world));
  testing::run_on_threads(
      world,
      [&](const dist::BackendContext& context) {
        dist::BackendContext c = context;
        c.bind_host = "127.0.0.1";
        auto comm = dist::make_hierarchical_communicator(c, host_of_rank[static_cast<size_t>(context.rank)]);
        names[static_cast<size_t>(context.rank)] = comm->backend_name();
        abortable[static_cast<size_t>(context.rank)] = comm->abortable();  // so the group runs it on the waiting thread
        return comm;
      },
      [&](dist::ProcessGroup& group) {
        auto f = testing::run_collective_suite(group, suite);
        std::lock_guard lock(mu);
        failures.insert(failures.end(), f.begin(), f.end());
      },
      options);
  for (const auto& n : names) EXPECT_EQ(n, "auto: shm within hosts + tcp between them");
  for (char a : abortable) EXPECT_TRUE(a);
  return failures;
}

std::string joined(const std::vector<std::string>& failures) {
  std::string s;
  for (const auto& f : failures) s += f + "\n";
  return s;
}

TEST(HierarchicalCollectives, TwoHostsOfTwoRanksMatchTheSerialReference) {
  auto failures = suite_on_hosts({"a", "a", "b", "b"});
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST(HierarchicalCollectives, UnevenHostsInterleavedRanksMatchTheSerialReference) {
  // Host a holds ranks 0, 2 and 3; host b rank 1; host c rank 4.
  auto failures = suite_on_hosts({"a", "b", "a", "a", "c"});
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

}  // namespace
}  // namespace tessera
