// The dry backend (tessera plan's): every call leaves this rank's buffers as if every peer were this
// rank, records what it was asked, and delivers messages through the mailbox, waiting for them only
// where the ranks run at once.
#include "tessera/dist/backends/dry/dry_communicator.h"

#include <gtest/gtest.h>

#include <thread>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera::dist {
namespace {

Deadline soon() { return detail::Clock::now() + std::chrono::seconds(5); }

template <typename T>
Buffer buffer_of(std::vector<T>& v, DType dtype) {
  return Buffer{v.data(), static_cast<int64_t>(v.size()), dtype};
}

TEST(DryCommunicator, ASumIsTheWorldSizeTimesThisRanksValueInEveryDtype) {
  auto log = std::make_shared<DryLog>();
  auto comm = make_dry_communicator(2, 7, log, std::make_shared<DryMailbox>(), false);
  std::vector<float> f{1.5f, -2.0f, 0.0f};
  comm->allreduce(buffer_of(f, DType::Float32), ReduceOp::Sum, soon());
  EXPECT_EQ(f, (std::vector<float>{10.5f, -14.0f, 0.0f}));
  std::vector<int64_t> i{3, -1};
  comm->allreduce(buffer_of(i, DType::Int64), ReduceOp::Sum, soon());
  EXPECT_EQ(i, (std::vector<int64_t>{21, -7}));
  std::vector<BFloat16> b{float_to_bf16(2.0f)};
  comm->allreduce(buffer_of(b, DType::BFloat16), ReduceOp::Sum, soon());
  EXPECT_EQ(bf16_to_float(b[0]), 14.0f);
  // An average, a maximum and a broadcast leave the value as it is.
  std::vector<float> g{4.0f};
  comm->allreduce(buffer_of(g, DType::Float32), ReduceOp::Avg, soon());
  comm->allreduce(buffer_of(g, DType::Float32), ReduceOp::Max, soon());
  comm->broadcast(buffer_of(g, DType::Float32), 0, soon());
  EXPECT_EQ(g, (std::vector<float>{4.0f}));
  const auto calls = log->calls();
  ASSERT_EQ(calls.size(), 6u);
  EXPECT_EQ(calls[0].op, "allreduce");
  EXPECT_EQ(calls[0].bytes(), 12);
  EXPECT_EQ(calls[5].op, "broadcast");
  EXPECT_EQ(calls[5].peer, 0);
  EXPECT_EQ(calls[5].group.size(), 7u);
}

TEST(DryCommunicator, GathersRepeatThisRanksPartAndScattersKeepItsOwnBlock) {
  auto comm = make_dry_communicator(1, 3, std::make_shared<DryLog>(), std::make_shared<DryMailbox>(), false);
  std::vector<float> in{1, 2}, out(7, -1.0f);
  const std::vector<int64_t> counts{2, 2, 3};  // unequal: the longer part gets zeros past this rank's
  comm->allgather(buffer_of(in, DType::Float32), buffer_of(out, DType::Float32), counts, soon());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 1, 2, 1, 2, 0}));
  std::vector<float> whole{1, 2, 3, 4, 5, 6}, mine(2);
  const std::vector<int64_t> equal{2, 2, 2};
  comm->reduce_scatter(buffer_of(whole, DType::Float32), buffer_of(mine, DType::Float32), equal, ReduceOp::Avg, soon());
  EXPECT_EQ(mine, (std::vector<float>{3, 4}));
  std::vector<float> blocks{1, 2, 3}, received(3);
  comm->alltoall(buffer_of(blocks, DType::Float32), buffer_of(received, DType::Float32), soon());
  EXPECT_EQ(received, (std::vector<float>{2, 2, 2}));  // every rank sends this rank block 1: its own
}

TEST(DryCommunicator, SplitsRecordTheirMembersAsGlobalRanks) {
  auto log = std::make_shared<DryLog>();
  auto world = make_dry_communicator(3, 4, log, std::make_shared<DryMailbox>(), false);
  const std::vector<int> odd{1, 3};
  auto sub = world->split(odd, nullptr, std::chrono::milliseconds(1000));
  EXPECT_EQ(sub->rank(), 1);
  EXPECT_EQ(sub->size(), 2);
  sub->barrier(soon());
  EXPECT_EQ(log->calls().back().group, odd);
}

TEST(DryCommunicator, MessagesArriveWhenRanksRunTogetherAndAreReplayedWhenAlone) {
  auto mailbox = std::make_shared<DryMailbox>();
  auto a = make_dry_communicator(0, 2, std::make_shared<DryLog>(), mailbox, true);
  auto b = make_dry_communicator(1, 2, std::make_shared<DryLog>(), mailbox, true);
  std::vector<int64_t> header(3, 0);
  std::thread receiver([&] { b->post_recv(buffer_of(header, DType::Int64), 0, 5)->wait(soon()); });
  std::vector<int64_t> sent{7, 8, 9};
  a->post_send(buffer_of(sent, DType::Int64), 1, 5)->wait(soon());
  receiver.join();
  EXPECT_EQ(header, sent);
  // Alone, afterwards: the same message again, and zeros where none was sent.
  mailbox->seal();
  mailbox->rewind();
  auto alone = make_dry_communicator(1, 2, std::make_shared<DryLog>(), mailbox, false);
  std::vector<int64_t> again(3, 0), never(2, 5);
  alone->post_recv(buffer_of(again, DType::Int64), 0, 5)->wait(soon());
  alone->post_recv(buffer_of(never, DType::Int64), 0, 6)->wait(soon());
  EXPECT_EQ(again, sent);
  EXPECT_EQ(never, (std::vector<int64_t>{0, 0}));
  // A message of another size than the receiver expects is an error naming it.
  a->post_send(buffer_of(sent, DType::Int64), 1, 7);  // sealed: not kept
  mailbox->rewind();
  std::vector<int64_t> wrong(2);
  EXPECT_THROW(alone->post_recv(buffer_of(wrong, DType::Int64), 0, 5)->wait(soon()), ValueError);
}

// Facts that differ from rank to rank (the vocabulary shards' sizes): small collectives are exact
// where the ranks run at once, and each rank's result is kept for its run alone; a large one moves
// nothing either way.
TEST(DryCommunicator, SmallCollectivesAreExactTogetherAndReplayedAlone) {
  auto mailbox = std::make_shared<DryMailbox>();
  std::vector<std::vector<int64_t>> gathered(2, std::vector<int64_t>(2, -1));
  std::vector<std::vector<float>> summed(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto comm = make_dry_communicator(r, 2, std::make_shared<DryLog>(), mailbox, true);
      std::vector<int64_t> mine{14 - r};  // 27 columns cut in 2
      comm->allgather(buffer_of(mine, DType::Int64), buffer_of(gathered[r], DType::Int64), std::vector<int64_t>{1, 1},
                      soon());
      summed[r] = {static_cast<float>(r + 1), 10.0f};
      comm->allreduce(buffer_of(summed[r], DType::Float32), ReduceOp::Avg, soon());
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(gathered[r], (std::vector<int64_t>{14, 13})) << r;
    EXPECT_EQ(summed[r], (std::vector<float>{1.5f, 10.0f})) << r;
  }
  mailbox->seal();
  auto alone = make_dry_communicator(1, 2, std::make_shared<DryLog>(), mailbox, false);
  std::vector<int64_t> mine{13}, again(2, -1);
  alone->allgather(buffer_of(mine, DType::Int64), buffer_of(again, DType::Int64), std::vector<int64_t>{1, 1}, soon());
  EXPECT_EQ(again, (std::vector<int64_t>{14, 13}));
  std::vector<float> big(4096, 1.0f);  // 16 KiB: dry, and too large to be worth scaling: as it was
  alone->allreduce(buffer_of(big, DType::Float32), ReduceOp::Sum, soon());
  EXPECT_EQ(big[0], 1.0f);
}

TEST(DryCommunicator, AWaitingReceiveFailsWhenTheSenderFailedOrAtItsDeadline) {
  auto mailbox = std::make_shared<DryMailbox>();
  auto b = make_dry_communicator(1, 2, std::make_shared<DryLog>(), mailbox, true);
  std::vector<float> x(1);
  EXPECT_THROW(b->post_recv(buffer_of(x, DType::Float32), 0, 1)->wait(detail::Clock::now() + std::chrono::milliseconds(50)),
               TimeoutError);
  // A sender whose run ended without the message: the wait fails at once, saying the calls differ.
  mailbox->finished(0);
  EXPECT_THROW(b->post_recv(buffer_of(x, DType::Float32), 0, 1)->wait(soon()), ValueError);
  mailbox->abort("rank 0's dry run failed: boom");
  try {
    b->post_recv(buffer_of(x, DType::Float32), 0, 1)->wait(soon());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::dist
