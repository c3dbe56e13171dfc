#include "tessera/parallel/ps/shard_plan.h"

#include <gtest/gtest.h>

#include "tessera/core/error.h"

namespace tessera::parallel::ps {
namespace {

TEST(PsShardPlan, SplitsLargeTensorsSoServersHoldEqualShares) {
  // One big matrix and two small vectors: the matrix must be cut into row ranges.
  ShardPlan plan({{"w1", 1000, 100, false}, {"b1", 100, 1, false}, {"w2", 10, 100, false}}, 3);
  int64_t total = 1000 * 100 + 100 + 1000;
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(plan.elements_of(s), total / 3.0, 100) << "server " << s;
  // Every row of every parameter is in exactly one piece, pieces in order.
  for (int p = 0; p < 3; ++p) {
    int64_t next = 0;
    for (const auto& piece : plan.pieces())
      if (piece.param == p) {
        EXPECT_EQ(piece.row_begin, next);
        next = piece.row_end;
      }
    EXPECT_EQ(next, plan.specs()[p].rows);
  }
}

TEST(PsShardPlan, FindsTheServerOfAnEmbeddingRow) {
  ShardPlan plan({{"emb", 1000, 8, true}, {"fc", 8, 10, false}}, 2);
  for (int64_t row : {0, 1, 499, 500, 999}) {
    const Piece& piece = plan.pieces()[plan.piece_of_row(0, row)];
    EXPECT_LE(piece.row_begin, row);
    EXPECT_GT(piece.row_end, row);
  }
  EXPECT_NE(plan.pieces()[plan.piece_of_row(0, 0)].server, plan.pieces()[plan.piece_of_row(0, 999)].server);
  EXPECT_THROW(plan.piece_of_row(0, 1000), IndexError);
  EXPECT_THROW(plan.piece_of_row(0, -1), IndexError);
}

TEST(PsShardPlan, MoreServersThanRowsLeavesSomeEmpty) {
  ShardPlan plan({{"b", 2, 1, false}}, 4);
  int64_t held = 0;
  for (int s = 0; s < 4; ++s) held += plan.elements_of(s);
  EXPECT_EQ(held, 2);
  EXPECT_THROW(ShardPlan({{"b", 2, 1, false}}, 0), ValueError);
}

}  // namespace
}  // namespace tessera::parallel::ps
