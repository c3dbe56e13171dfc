// What tessera plan says each rank sends, by link, for each call (tessera/plan/link_bytes.h).
#include "tessera/plan/link_bytes.h"

#include <gtest/gtest.h>

namespace tessera::plan {
namespace {

dist::DryCall call(const char* op, int64_t elements, std::vector<int> group, int peer = -1) {
  return dist::DryCall{"step 1", op, DType::Float32, elements, std::move(group), peer};
}

TEST(LinkBytes, AnAllReduceInsideOneHostIsARingInSharedMemory) {
  const HostLayout one{4, 1};
  const LinkBytes b = bytes_sent(call("allreduce", 1000, {0, 1, 2, 3}), 2, one);
  EXPECT_EQ(b.within_host, 2 * 4000 * 3 / 4);
  EXPECT_EQ(b.between_hosts, 0);
}

TEST(LinkBytes, AnAllReduceAcrossHostsSendsOnlyFromEachHostsLeader) {
  const HostLayout two{4, 2};  // ranks 0-1 on host 0, 2-3 on host 1
  const auto all = call("allreduce", 1000, {0, 1, 2, 3});
  for (int leader : {0, 2}) {
    EXPECT_EQ(bytes_sent(all, leader, two).between_hosts, 2 * 4000 / 2) << leader;
    EXPECT_EQ(bytes_sent(all, leader, two).within_host, 2 * 4000 / 2) << leader;
  }
  EXPECT_EQ(bytes_sent(all, 1, two).between_hosts, 0);
  // The replicas of HSDP (one rank per host in the group) all lead.
  EXPECT_EQ(bytes_sent(call("allreduce", 1000, {1, 3}), 3, two).between_hosts, 4000);
}

TEST(LinkBytes, GathersGoRoundTheRingAndAllToAllGoesStraight) {
  const HostLayout two{4, 2};
  // Rank 1's next in the ring is rank 2, on the other host; rank 0's is rank 1, on its own.
  const auto gather = call("allgather", 4000, {0, 1, 2, 3});
  EXPECT_EQ(bytes_sent(gather, 1, two).between_hosts, 16000 * 3 / 4);
  EXPECT_EQ(bytes_sent(gather, 0, two).within_host, 16000 * 3 / 4);
  const LinkBytes a2a = bytes_sent(call("alltoall", 4000, {0, 1, 2, 3}), 0, two);
  EXPECT_EQ(a2a.within_host, 4000);   // its block for rank 1
  EXPECT_EQ(a2a.between_hosts, 8000);  // for ranks 2 and 3
}

TEST(LinkBytes, BroadcastsChainFromTheRootAndMessagesGoToTheirPeer) {
  const HostLayout two{4, 2};
  const auto from_two = call("broadcast", 10, {0, 1, 2, 3}, 2);
  EXPECT_EQ(bytes_sent(from_two, 1, two).within_host, 0);  // the last of the chain 2, 3, 0, 1
  EXPECT_EQ(bytes_sent(from_two, 3, two).between_hosts, 40);
  EXPECT_EQ(bytes_sent(call("send", 10, {0, 1, 2, 3}, 3), 1, two).between_hosts, 40);
  EXPECT_EQ(bytes_sent(call("recv", 10, {0, 1, 2, 3}, 3), 1, two).between_hosts, 0);
  EXPECT_EQ(bytes_sent(call("allreduce", 10, {1}), 1, two).within_host, 0);  // a group of one sends nothing
}

}  // namespace
}  // namespace tessera::plan
